package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// classifyPolicy has a rule on each match field the classifier indexes.
var classifyPolicy = ruleTable("mgmt", `src = ["10.9.0.0/16", "fd00:9::/32"], proto = ["tcp"], dport = ["22", "8000-8100"]`, acceptAction) +
	ruleTable("blocked", `src = ["10.9.9.0/24"]`, dropAction) +
	ruleTable("dns", `proto = ["udp"], dport = ["53"]`, `pps = 10`) +
	ruleTable("gre6", `family = "ipv6", proto = [47]`, dropAction) +
	ruleTable("marked", `mark = "0x10/0xf0"`, `pps = 1`) +
	ruleTable("q", `queue = [3, 7], iif = ["eth0"], oif = ["eth1"]`, `pps = 1`) +
	ruleTable("sports", `sport = ["1000-2000"], dst = ["192.0.2.0/24"]`, `pps = 1`) +
	ruleTable("icmp", `proto = ["icmp", "icmpv6"]`, `pps = 1`)

// pkt makes a decoded packet: "tcp 10.0.0.1:40000 > 10.0.0.2:22", "47
// fd00::1 > fd00::2", "icmp 10.0.0.1:7 > 10.0.0.2:7" (an echo id), with
// "noports" or "unknown" (an IPv6 chain not walked to its end) after it.
func pkt(s string) *flows.Packet {
	f := strings.Fields(s)
	p := &flows.Packet{}
	for name, v := range protoNames {
		if f[0] == name {
			p.Proto = v
		}
	}
	if p.Proto == 0 {
		var n int
		fmt.Sscan(f[0], &n)
		p.Proto = uint8(n)
	}
	ep := func(s string) ([16]byte, uint16) {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return addr16(ap.Addr()), ap.Port()
		}
		return addr16(netip.MustParseAddr(s)), 0
	}
	p.Src, p.SrcPort = ep(f[1])
	p.Dst, p.DstPort = ep(f[3])
	p.Class = flows.IPv4
	if strings.Contains(f[1], ":") && !strings.Contains(f[1], ".") {
		p.Class = flows.IPv6
	}
	for _, x := range f[4:] {
		switch x {
		case "noports":
			p.NoPorts, p.SrcPort, p.DstPort = true, 0, 0
		case "unknown":
			p.NoPorts, p.SrcPort, p.DstPort, p.Proto = true, 0, 0, flows.ProtoUnknown
		case "fragment":
			p.Fragment, p.NoPorts, p.SrcPort, p.DstPort = true, true, 0, 0
		}
	}
	return p
}

func addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		var b [16]byte
		x := a.As4()
		copy(b[:], x[:])
		return b
	}
	return a.As16()
}

// ruleTable is a [[rule]] table (testutil.PolicyRule).
var ruleTable = testutil.PolicyRule

// The actions of accept and drop rules, as ruleTable's settings.
const (
	acceptAction = `action = "accept"`
	dropAction   = `action = "drop"`
)

func mustCompile(t testing.TB, src string, o Options) *Compiled {
	t.Helper()
	_, c := parseCompile(t, "", src, o)
	return c
}

// parseCompile parses src (as p.toml) and compiles it with o; an error of
// either is fatal, after what (the case, when not empty) and a colon.
func parseCompile(t testing.TB, what, src string, o Options) (*File, *Compiled) {
	t.Helper()
	fatal := func(err error) {
		t.Helper()
		if what != "" {
			t.Fatalf("%s: %v", what, err)
		}
		t.Fatal(err)
	}
	f, err := Parse("p.toml", []byte(src))
	if err != nil {
		fatal(err)
	}
	c, err := f.Compile(o)
	if err != nil {
		fatal(err)
	}
	return f, c
}

func TestClassify(t *testing.T) {
	c := mustCompile(t, classifyPolicy, Options{})
	eth0, eth1 := c.IfaceID("eth0"), c.IfaceID("eth1")
	if eth0 != 1 || eth1 != 2 || c.IfaceID("eth9") != 0 {
		t.Fatalf("IfaceID: eth0 %d, eth1 %d, eth9 %d", eth0, eth1, c.IfaceID("eth9"))
	}
	pol := c.Policy()
	for _, tc := range []struct {
		pkt  string
		meta shaper.Meta
		want string // rule name, "" for none
	}{
		{"tcp 10.9.1.1:40000 > 10.0.0.2:22", shaper.Meta{}, "mgmt"},
		{"tcp 10.9.1.1:40000 > 10.0.0.2:8000", shaper.Meta{}, "mgmt"},
		{"tcp 10.9.1.1:40000 > 10.0.0.2:8100", shaper.Meta{}, "mgmt"},
		{"tcp 10.9.1.1:40000 > 10.0.0.2:8101", shaper.Meta{}, ""},
		{"tcp 10.9.1.1:40000 > 10.0.0.2:23", shaper.Meta{}, ""},
		{"tcp 10.8.1.1:40000 > 10.0.0.2:22", shaper.Meta{}, ""},
		{"udp 10.9.1.1:40000 > 10.0.0.2:22", shaper.Meta{}, ""},
		{"tcp [fd00:9::1]:40000 > [fd00::2]:22", shaper.Meta{}, "mgmt"},
		{"tcp [fd00:8::1]:40000 > [fd00::2]:22", shaper.Meta{}, ""},
		// First match: mgmt before blocked, blocked before dns.
		{"tcp 10.9.9.5:40000 > 10.0.0.2:22", shaper.Meta{}, "mgmt"},
		{"udp 10.9.9.5:40000 > 10.0.0.2:53", shaper.Meta{}, "blocked"},
		{"udp 10.1.1.1:40000 > 10.0.0.2:53", shaper.Meta{}, "dns"},
		{"tcp 10.1.1.1:40000 > 10.0.0.2:53", shaper.Meta{}, ""},
		// Hidden ports never reach the accept rule, and meet the
		// port constraints of limit and drop rules.
		{"tcp 10.9.1.1 > 10.0.0.2 noports", shaper.Meta{}, ""},
		{"udp 10.1.1.1 > 10.0.0.2 noports", shaper.Meta{}, "dns"},
		{"udp 10.1.1.1 > 192.0.2.1 noports", shaper.Meta{}, "dns"},
		{"tcp 10.1.1.1 > 192.0.2.1 noports", shaper.Meta{}, "sports"},
		{"6 fd00:9::1 > fd00::2 unknown", shaper.Meta{}, "dns"},
		// Family and protocol numbers.
		{"47 fd00::1 > fd00::2", shaper.Meta{}, "gre6"},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{}, ""},
		// Marks.
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Mark: 0x15}, "marked"},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Mark: 0x25}, ""},
		// Queue and interfaces: all must hold.
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Queue: 3, InIf: eth0, OutIf: eth1}, "q"},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Queue: 7, InIf: eth0, OutIf: eth1}, "q"},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Queue: 4, InIf: eth0, OutIf: eth1}, ""},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Queue: 3, InIf: eth1, OutIf: eth1}, ""},
		{"47 10.0.0.1 > 10.0.0.2", shaper.Meta{Queue: 3, InIf: eth0}, ""},
		// Ports hold only for protocols with ports: an ICMP echo id
		// in the port fields does not.
		{"udp 10.0.0.1:1000 > 192.0.2.1:9", shaper.Meta{}, "sports"},
		{"sctp 10.0.0.1:2000 > 192.0.2.1:9", shaper.Meta{}, "sports"},
		{"udp 10.0.0.1:2001 > 192.0.2.1:9", shaper.Meta{}, ""},
		{"udp 10.0.0.1:999 > 192.0.2.1:9", shaper.Meta{}, ""},
		{"udp [2001:db8::1]:1500 > [2001:db8::2]:9", shaper.Meta{}, ""},
		{"icmp 10.0.0.1:1500 > 192.0.2.1:1500", shaper.Meta{}, "icmp"},
		{"icmpv6 [fd00::1]:1500 > [fd00::2]:1500", shaper.Meta{}, "icmp"},
		{"icmp 10.0.0.1 > 192.0.2.1 noports", shaper.Meta{}, "icmp"},
	} {
		p := pkt(tc.pkt)
		got := ""
		if i := pol.Classifier.Classify(p, &tc.meta); i >= 0 {
			got = pol.Rules[i].Name
		}
		if got != tc.want {
			t.Errorf("Classify(%s, %+v) = %q, want %q", tc.pkt, tc.meta, got, tc.want)
		}
	}
	if i := pol.Classifier.Classify(&flows.Packet{}, nil); i != -1 {
		t.Errorf("Classify(malformed) = %d", i)
	}
}

func TestCompileWarnsUnreachable(t *testing.T) {
	c := mustCompile(t, "[[rule]]\nname = \"all\"\naction = \"accept\"\n\n[[rule]]\nname = \"late\"\npps = 1\nmatch = { proto = [\"udp\"] }\n", Options{})
	if got, want := c.Warnings(), []string{`rule "late": never reached: rule "all" before it has no match table and takes every packet`}; !slices.Equal(got, want) {
		t.Errorf("Warnings = %q, want %q", got, want)
	}
}

// A reload keeps the state of the rules whose name, match and limit are
// unchanged, whatever the spelling of their match tables.
func TestReloadIdentity(t *testing.T) {
	e, err := shaper.NewPolicy(mustCompile(t, ruleTable("dns", `proto = ["udp"], dport = ["53"]`, `pps = 10`)+
		ruleTable("web", `proto = ["tcp"], dport = ["80", "443"]`, `pps = 5`), Options{}).Policy())
	if err != nil {
		t.Fatal(err)
	}
	_, kept, err := e.Reload(mustCompile(t, ruleTable("dns", `dport = [53], proto = [17]`, `pps = 10`, `burst = 5`)+
		ruleTable("web", `proto = ["tcp"], dport = ["80", "443"]`, `pps = 6`), Options{}).Policy())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kept, []string{"dns"}) {
		t.Errorf("Reload kept %q, want [dns]", kept)
	}
}

func TestClassifyConcurrent(t *testing.T) {
	cl := mustCompile(t, classifyPolicy, Options{}).Policy().Classifier
	p := pkt("udp 10.1.1.1:40000 > 10.0.0.2:53")
	done := make(chan int)
	for range 4 {
		go func() {
			n := 0
			for range 1000 {
				n += cl.Classify(p, &shaper.Meta{})
			}
			done <- n
		}()
	}
	for range 4 {
		if n := <-done; n != 2000 {
			t.Errorf("sum of rules %d, want 2000", n)
		}
	}
}

func TestCompileInterfaces(t *testing.T) {
	known := map[string]uint32{"eth0": 4}
	c := mustCompile(t, classifyPolicy, Options{IfIndex: func(n string) (uint32, bool) { v, ok := known[n]; return v, ok }})
	if got, want := otherWarnings(c), []string{`rule "q": match.oif: no interface "eth1": it matches no packet until a reload`}; !slices.Equal(got, want) {
		t.Errorf("Warnings = %q, want %q", got, want)
	}
	if c.IfaceID("eth0") != 4 || c.IfaceID("eth1") != 0 {
		t.Errorf("IfaceID: eth0 %d, eth1 %d", c.IfaceID("eth0"), c.IfaceID("eth1"))
	}
	pol := c.Policy()
	for _, m := range []shaper.Meta{{Queue: 3, InIf: 4, OutIf: 0}, {Queue: 3, InIf: 4, OutIf: 4}} {
		if i := pol.Classifier.Classify(pkt("47 10.0.0.1 > 10.0.0.2"), &m); i != -1 {
			t.Errorf("Classify with %+v = %s, want none: eth1 does not exist", m, pol.Rules[i].Name)
		}
	}
}

func TestCompilePolicy(t *testing.T) {
	f, err := Load("testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Compile(Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy()
	want := []shaper.Rule{
		{Name: "mgmt", Match: "src=10.9.0.0/16,fd00:9::/32 proto=tcp dport=22,8000-8100", Action: shaper.ActionAccept},
		{Name: "dns", Match: "proto=udp dport=53", Limit: shaper.Config{Rate: 10, Burst: 2, Window: 1e9,
			Key: flows.KeyConfig{Mode: flows.Src, SrcPrefix4: 24, DstPrefix4: 32, SrcPrefix6: 128, DstPrefix6: 128}, MaxFlows: 65536, FlowTimeout: 60e9}},
		{Name: "web-trial", Match: "proto=tcp dport=80,443", Shadow: true, Limit: shaper.Config{Rate: 5, Burst: 5, Window: 1e9,
			Key: flows.KeyConfig{SrcPrefix4: 32, DstPrefix4: 32, SrcPrefix6: 128, DstPrefix6: 128}, MaxFlows: 65536, FlowTimeout: 60e9}},
		{Name: "rest", Match: "proto=udp", Limit: shaper.Config{Algorithm: shaper.FixedWindow, Rate: 20, Burst: 5, Window: 1e9,
			Key: flows.KeyConfig{SrcPrefix4: 32, DstPrefix4: 32, SrcPrefix6: 128, DstPrefix6: 128}, MaxFlows: 65536, FlowTimeout: 60e9}},
	}
	if !slices.Equal(p.Rules, want) {
		t.Errorf("Policy().Rules:\n got %+v\nwant %+v", p.Rules, want)
	}
	if p.Classifier == nil {
		t.Error("no classifier")
	}
	if _, err := shaper.NewPolicy(p); err != nil {
		t.Error(err)
	}

	// One rule that matches everything needs no classifier.
	one := mustCompile(t, "[[rule]]\nname = \"default\"\npps = 1\n", Options{})
	if one.Policy().Classifier != nil {
		t.Error("one rule without match: classifier not nil")
	}
	pps := 1.0
	code := &File{Rules: []Rule{{Name: "default", PPS: &pps}}}
	c2, err := code.Compile(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c2.Policy().Rules[0]; got != one.Policy().Rules[0] {
		t.Errorf("File in code compiles to %+v, from a file to %+v", got, one.Policy().Rules[0])
	}
}

// The canonical match text identifies a rule across reloads, whatever the
// spelling.
func TestCanonicalMatch(t *testing.T) {
	texts := func(src string) string { return mustCompile(t, src, Options{}).Policy().Rules[0].Match }
	a := texts(`[[rule]]
name = "a"
pps = 1
match = { dport = ["80", "81", "82-90", "443", "80"], src = ["fd00::/8", "10.0.0.1", "10.0.0.0/8"], proto = [17, "tcp"], queue = [2, 1, 2], mark = "16/0xff" }`)
	b := texts(`[[rule]]
name = "a"
pps = 1
match = { src = ["10.0.0.0/8", "10.0.0.1/32", "fd00::/8"], proto = ["tcp", "udp"], dport = ["443", "80-90"], queue = [1, 2], mark = "0x10/0xff" }`)
	want := "src=10.0.0.0/8,10.0.0.1/32,fd00::/8 proto=tcp,udp dport=80-90,443 mark=0x10/0xff queue=1,2"
	if a != want || b != want {
		t.Errorf("canonical match:\n got %s\n and %s\nwant %s", a, b, want)
	}
}

func TestEngineWithPolicy(t *testing.T) {
	c := mustCompile(t, ruleTable("ssh", `proto = ["tcp"], dport = ["22"]`, acceptAction)+
		ruleTable("shadow", `proto = ["udp"], dport = ["53"]`, `pps = 1`, `burst = 1`, `mode = "shadow"`)+
		ruleTable("mark", `proto = ["udp"], dport = ["123"]`, `pps = 1`, `burst = 1`, `on-exceed = "mark"`, `set-mark = "0x100/0xf00"`)+
		ruleTable("rest", "", `pps = 1`, `burst = 1`), Options{})
	e, err := shaper.NewPolicy(c.Policy())
	if err != nil {
		t.Fatal(err)
	}
	var d shaper.Decision
	decide := func(b []byte, m *shaper.Meta) shaper.Decision {
		e.DecidePacket(b, m, 1e18, &d)
		return d
	}
	ssh := packet4(flows.ProtoTCP, 1, 40000, 22)
	for range 3 {
		if d := decide(ssh, nil); d.Verdict != shaper.Accept || d.Rule != 0 {
			t.Errorf("ssh: %+v", d)
		}
	}
	// A fragment of the ssh flow hides its ports: the accept rule does
	// not take it; the catch-all limit does.
	frag := packet4(flows.ProtoTCP, 1, 40000, 22)
	frag[6], frag[7] = 0, 100 // fragment offset 100
	if d := decide(frag, nil); d.Rule != 3 || d.Verdict != shaper.Accept {
		t.Errorf("fragment 1: %+v", d)
	}
	if d := decide(frag, nil); d.Rule != 3 || d.Verdict != shaper.Drop {
		t.Errorf("fragment 2: %+v", d)
	}
	dns := packet4(flows.ProtoUDP, 2, 40000, 53)
	decide(dns, nil)
	if d := decide(dns, nil); d.Rule != 1 || d.Verdict != shaper.Accept {
		t.Errorf("shadow: %+v", d)
	}
	if s := e.RuleStats(1); s.ShadowDropped != 1 || s.Accepted != 2 {
		t.Errorf("shadow stats: %+v", s)
	}
	ntp := packet4(flows.ProtoUDP, 3, 40000, 123)
	decide(ntp, nil)
	if d := decide(ntp, &shaper.Meta{Mark: 0x1234}); d.Rule != 2 || d.Verdict != shaper.Accept || !d.SetMark || d.Mark != 0x1134 {
		t.Errorf("mark: %+v", d)
	}
}

// packet4 is an IPv4 packet from 10.0.0.i to 10.255.0.1 with the given
// transport header ports (8 bytes of header, no payload).
func packet4(proto uint8, i int, sport, dport uint16) []byte {
	b := make([]byte, 28)
	b[0] = 0x45
	b[3] = 28
	b[8], b[9] = 64, proto
	copy(b[12:], []byte{10, 0, 0, byte(i)})
	copy(b[16:], []byte{10, 255, 0, 1})
	b[20], b[21], b[22], b[23] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
	return b
}

func TestClassifyNoAllocs(t *testing.T) {
	c := mustCompile(t, classifyPolicy, Options{})
	big := mustCompile(t, bigPolicy(100, 10_000), Options{})
	pkts := []*flows.Packet{
		pkt("tcp 10.9.1.1:40000 > 10.0.0.2:22"), pkt("tcp [fd00:9::1]:40000 > [fd00::2]:22"),
		pkt("udp 10.1.1.1 > 10.0.0.2 noports"), pkt("47 10.0.0.1 > 10.0.0.2"), pkt("6 fd00:9::1 > fd00::2 unknown"),
	}
	m := &shaper.Meta{Mark: 0x15, Queue: 3, InIf: 1}
	for _, cl := range []shaper.Classifier{c.Policy().Classifier, big.Policy().Classifier} {
		for _, p := range pkts {
			if n := testing.AllocsPerRun(100, func() { cl.Classify(p, m) }); n != 0 {
				t.Errorf("Classify allocates %v times per call", n)
			}
		}
	}
}

// bigPolicy is a policy of n rules carrying k CIDRs in all: rule r has the
// /24s 10.x.y.0/24 numbered r, r+n, r+2n, ... (k of them in all, numbered
// from 0), a few of them as an IPv6 /48 instead, and alternately proto
// tcp and udp; the last rule matches everything.
func bigPolicy(n, k int) string {
	var b strings.Builder
	for r := range n - 1 {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\npps = 1000\nmatch = { proto = [%q], src = [", r, []string{"tcp", "udp"}[r%2])
		for i := r; i < k; i += n - 1 {
			if i != r {
				b.WriteString(", ")
			}
			if i%50 == 7 {
				fmt.Fprintf(&b, "\"fd00:%x:%x::/48\"", i>>8, i&0xff)
			} else {
				fmt.Fprintf(&b, "\"10.%d.%d.0/24\"", i>>8, i&0xff)
			}
		}
		b.WriteString("] }\n\n")
	}
	b.WriteString("[[rule]]\nname = \"rest\"\npps = 1000\n")
	return b.String()
}

// ref is the reference classifier: each rule's match table checked field
// by field, as the package documents matching.
func ref(specs []ruleSpec, ifaces map[string]uint32, p *flows.Packet, m *shaper.Meta) int {
	for i := range specs {
		s := &specs[i].match
		if refMatch(s, specs[i].rule.Action, ifaces, p, m) {
			return i
		}
	}
	return -1
}

func refMatch(s *matchSpec, action shaper.Action, ifaces map[string]uint32, p *flows.Packet, m *shaper.Meta) bool {
	accept := action == shaper.ActionAccept
	fam := uint8(4)
	if p.Class == flows.IPv6 {
		fam = 6
	}
	if s.family != 0 && s.family != fam {
		return false
	}
	addr := func(a [16]byte) netip.Addr {
		if fam == 4 {
			return netip.AddrFrom4([4]byte(a[:4]))
		}
		return netip.AddrFrom16(a)
	}
	in := func(ps []netip.Prefix, a netip.Addr) bool {
		if ps == nil {
			return true
		}
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if !in(s.src, addr(p.Src)) || !in(s.dst, addr(p.Dst)) {
		return false
	}
	// What an unknown value meets: the constraints of limit and drop
	// rules, but for a later fragment only those of limit rules (its
	// datagram's first fragment shows the headers to drop rules).
	meetsUnknown := !accept
	if p.Fragment {
		meetsUnknown = action == shaper.ActionLimit
	}
	protoUnknown := p.Proto == flows.ProtoUnknown
	if s.proto != nil && !slices.Contains(s.proto, p.Proto) && !(protoUnknown && meetsUnknown) {
		return false
	}
	portsUnknown := p.NoPorts && (hasPorts(p.Proto) || protoUnknown)
	ports := func(rs []portRange, port uint16) bool {
		if rs == nil {
			return true
		}
		if portsUnknown {
			return meetsUnknown
		}
		if !hasPorts(p.Proto) {
			return false
		}
		for _, r := range rs {
			if r.lo <= port && port <= r.hi {
				return true
			}
		}
		return false
	}
	if !ports(s.sport, p.SrcPort) || !ports(s.dport, p.DstPort) {
		return false
	}
	iface := func(names []string, id uint32) bool {
		if names == nil {
			return true
		}
		for _, n := range names {
			if ifaces[n] != 0 && ifaces[n] == id {
				return true
			}
		}
		return false
	}
	if !iface(s.iif, m.InIf) || !iface(s.oif, m.OutIf) {
		return false
	}
	if s.hasMark && m.Mark&s.markMask != s.mark {
		return false
	}
	if s.queue != nil && !slices.Contains(s.queue, m.Queue) {
		return false
	}
	return refL4(s, accept, meetsUnknown, p, m)
}

// TestClassifyRandom compares the classifier with ref on random policies
// (up to 200 rules: several bitset words; up to hundreds of prefixes and
// port bounds: the tables as well as the scans) and random packets drawn
// from the values the rules use.
func TestClassifyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(200)
		if round%3 == 0 {
			n = 1 + rng.IntN(10)
		}
		src := randomPolicy(rng, n, round%4 == 0)
		f, err := Parse("p.toml", []byte(src))
		if err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, src)
		}
		specs, _, err := f.check()
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.Compile(Options{})
		if err != nil {
			t.Fatal(err)
		}
		cl := c.Policy().Classifier
		for range 2000 {
			p, m := randomPacket(rng)
			want := ref(specs, c.ifaces, p, m)
			got := 0
			if cl != nil {
				got = cl.Classify(p, m)
			}
			if got != want {
				t.Fatalf("round %d: Classify(%+v, %+v) = %d, want %d\n%s", round, p, m, got, want, src)
			}
		}
	}
}

var (
	randPrefixes = []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3", "10.2.0.0/15", "0.0.0.0/0", "192.0.2.0/25", "192.0.2.128/25",
		"fd00::/8", "fd00:1::/32", "fd00:1:2::/48", "fd00:1:2::3", "::/0", "2001:db8::/33", "2001:db8:8000::/33"}
	randProtos = []string{"tcp", "udp", "icmp", "icmpv6", "sctp", "udplite", "47", "0"}
	randPorts  = []string{"0", "22", "53", "80", "443", "1-1023", "1024-65535", "8000-8100", "65535", "50-60"}
)

func randomPolicy(rng *rand.Rand, n int, many bool) string {
	var b strings.Builder
	pick := func(from []string, max int) string {
		k := 1 + rng.IntN(max)
		items := make([]string, k)
		for i := range items {
			items[i] = fmt.Sprintf("%q", from[rng.IntN(len(from))])
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	for r := range n {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\n", r)
		switch rng.IntN(4) {
		case 0:
			b.WriteString("action = \"accept\"\n")
		case 1:
			b.WriteString("action = \"drop\"\n")
		default:
			b.WriteString("pps = 1\n")
		}
		var fields []string
		if rng.IntN(3) == 0 {
			fields = append(fields, "family = "+[]string{`"ipv4"`, `"ipv6"`}[rng.IntN(2)])
		}
		for _, k := range []string{"src", "dst"} {
			if rng.IntN(3) == 0 {
				if many {
					var items []string
					for range 1 + rng.IntN(40) {
						items = append(items, fmt.Sprintf("\"10.%d.%d.0/24\"", rng.IntN(4), rng.IntN(8)), fmt.Sprintf("\"fd00:%x::/32\"", rng.IntN(16)))
						if rng.IntN(5) == 0 {
							// Nested prefixes: classes are unions.
							items = append(items, fmt.Sprintf("\"10.%d.0.0/16\"", rng.IntN(4)), strconv.Quote(randPrefixes[rng.IntN(len(randPrefixes))]))
						}
					}
					fields = append(fields, k+" = ["+strings.Join(items, ", ")+"]")
				} else {
					fields = append(fields, k+" = "+pick(randPrefixes, 3))
				}
			}
		}
		proto := -1
		if rng.IntN(3) == 0 {
			proto = len(fields)
			fields = append(fields, "proto = "+pick(randProtos, 3))
		}
		for _, k := range []string{"sport", "dport"} {
			if rng.IntN(4) == 0 {
				if many {
					var items []string
					for range 1 + rng.IntN(20) {
						lo := rng.IntN(2000)
						items = append(items, fmt.Sprintf("\"%d-%d\"", lo, lo+rng.IntN(10)))
					}
					fields = append(fields, k+" = ["+strings.Join(items, ", ")+"]")
				} else {
					fields = append(fields, k+" = "+pick(randPorts, 3))
				}
			}
		}
		if rng.IntN(8) == 0 {
			fields = append(fields, "iif = "+pick([]string{"a", "b", "c"}, 2))
		}
		if rng.IntN(8) == 0 {
			fields = append(fields, "oif = "+pick([]string{"a", "b", "c"}, 2))
		}
		if rng.IntN(8) == 0 {
			fields = append(fields, "mark = "+[]string{`"0x1/0x1"`, `"0x2/0x3"`, `"0x0/0x1"`, `"0x3"`}[rng.IntN(4)])
		}
		if rng.IntN(8) == 0 {
			fields = append(fields, "queue = "+strings.ReplaceAll(pick([]string{"0", "1", "2", "3"}, 2), `"`, ""))
		}
		fields = append(fields, randomL4Fields(rng)...)
		if len(fields) > 0 {
			// Rules that never match are refused; leave the
			// contradiction of family and addresses out.
			fs := strings.Join(fields, ", ")
			if strings.Contains(fs, "family") && (strings.Contains(fs, "src") || strings.Contains(fs, "dst")) {
				fs = strings.Join(fields[1:], ", ")
			}
			if proto >= 0 && strings.Contains(fs, "port =") && !strings.Contains(fields[proto], "tcp\"") && !strings.Contains(fields[proto], "udp") && !strings.Contains(fields[proto], "sctp") {
				// Ports with only protocols without ports: refused.
				fs = strings.Replace(fs, "proto = [", "proto = [\"tcp\", ", 1)
			}
			if proto >= 0 && strings.Contains(fs, "tcp-flags") && !strings.Contains(fields[proto], "tcp\"") {
				fs = strings.Replace(fs, "proto = [", "proto = [\"tcp\", ", 1)
			}
			if proto >= 0 && strings.Contains(fs, "icmp-type") && !strings.Contains(fields[proto], "icmp") {
				fs = strings.Replace(fs, "proto = [", "proto = [\"icmpv6\", ", 1)
			}
			fmt.Fprintf(&b, "match = { %s }\n", fs)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func randomPacket(rng *rand.Rand) (*flows.Packet, *shaper.Meta) {
	p := &flows.Packet{Class: flows.IPv4}
	v4 := func() [16]byte {
		var a [16]byte
		a[0], a[1], a[2], a[3] = []byte{10, 192, 0, 10}[rng.IntN(4)], byte(rng.IntN(4)), byte(rng.IntN(8)), byte(rng.IntN(5))
		if a[0] == 192 {
			a[1], a[2], a[3] = 0, 2, byte(rng.IntN(256))
		}
		return a
	}
	v6 := func() [16]byte {
		var a [16]byte
		a[0], a[1], a[2], a[3] = []byte{0xfd, 0x20, 0}[rng.IntN(3)], byte(rng.IntN(2)), 0, byte(rng.IntN(16))
		if a[0] == 0x20 {
			a[1], a[2], a[3], a[4] = 0x01, 0x0d, 0xb8, byte(rng.IntN(256))
		}
		a[5], a[15] = byte(rng.IntN(3)), byte(rng.IntN(4))
		return a
	}
	if rng.IntN(2) == 0 {
		p.Src, p.Dst = v4(), v4()
	} else {
		p.Class = flows.IPv6
		p.Src, p.Dst = v6(), v6()
	}
	protos := []uint8{6, 17, 1, 58, 132, 136, 47, 0, 255}
	p.Proto = protos[rng.IntN(len(protos))]
	ports := []uint16{0, 22, 53, 80, 443, 1023, 1024, 8000, 8100, 8101, 65535, 55, 50, 60, 61, 49}
	port := func() uint16 {
		if rng.IntN(3) == 0 {
			return uint16(rng.IntN(2100))
		}
		return ports[rng.IntN(len(ports))]
	}
	p.SrcPort, p.DstPort = port(), port()
	if rng.IntN(5) == 0 || p.Proto == 255 {
		p.NoPorts, p.SrcPort, p.DstPort = true, 0, 0
		// A later fragment, half of the time (an IPv6 one has an
		// unknown protocol, as the decoder makes it).
		if rng.IntN(2) == 0 {
			p.Fragment = true
			if p.Class == flows.IPv6 {
				p.Proto = flows.ProtoUnknown
			}
		}
	}
	m := &shaper.Meta{Mark: uint32(rng.IntN(4)), Queue: uint16(rng.IntN(5)), InIf: uint32(rng.IntN(4)), OutIf: uint32(rng.IntN(4))}
	randomL4(rng, p, m)
	return p, m
}

// TestClassifyFragments: a later fragment meets the unknown-port and
// unknown-protocol constraints of limit rules only. A narrow drop rule must
// not take every fragment of every datagram (the first fragment, which
// shows the ports, meets it or not), and an IPv6 later fragment, whose
// protocol is unknown, never reaches an accept rule (the review's ICMPv6
// allowlist trick). A first fragment cut before its ports is not a later
// fragment: drop rules take it conservatively, and without it the datagram
// never reassembles.
func TestClassifyFragments(t *testing.T) {
	c := mustCompile(t, ruleTable("netbios", `proto = ["udp"], dport = ["137-139"]`, dropAction)+
		ruleTable("icmp6", `proto = ["icmpv6"]`, acceptAction)+
		ruleTable("udp-limit", `proto = ["udp"], dport = ["4500"]`, `pps = 100`)+
		ruleTable("rest", "", `pps = 10`), Options{})
	pol := c.Policy()
	for _, tc := range []struct{ pkt, want string }{
		{"udp 10.0.0.1:5000 > 10.0.0.2:137", "netbios"},
		{"udp 10.0.0.1 > 10.0.0.2 fragment", "udp-limit"},
		{"udp 10.0.0.1 > 10.0.0.2 noports", "netbios"},
		{"255 fd00::1 > fd00::2 fragment", "udp-limit"},
		{"icmpv6 fd00::1 > fd00::2", "icmp6"},
		{"tcp 10.0.0.1 > 10.0.0.2 fragment", "rest"},
	} {
		p := pkt(tc.pkt)
		got := ""
		if i := pol.Classifier.Classify(p, &shaper.Meta{}); i >= 0 {
			got = pol.Rules[i].Name
		}
		if got != tc.want {
			t.Errorf("Classify(%s) = %q, want %q", tc.pkt, got, tc.want)
		}
	}
}
