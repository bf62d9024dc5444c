package shaper

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
)

// udp returns an IPv4 UDP packet from 10.a.b.c:sport to 10.255.0.1:9000
// with the given payload size, flow i's source being 10.(i>>16).(i>>8).i.
func udp(i int, sport uint16, payload int) []byte {
	b := make([]byte, 28+payload)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	copy(b[16:], []byte{10, 255, 0, 1})
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], 9000)
	binary.BigEndian.PutUint16(b[24:], uint16(8+payload))
	return b
}

func mustNew(t testing.TB, c Config) *Engine {
	t.Helper()
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEnginePerFlow(t *testing.T) {
	e := mustNew(t, Config{Rate: 10, Burst: 2})
	a, b := udp(1, 1000, 10), udp(2, 1000, 10)
	var got []Verdict
	for _, p := range [][]byte{a, a, a, b, b, b} {
		got = append(got, e.Decide(p, t0))
	}
	want := []Verdict{Accept, Accept, Drop, Accept, Accept, Drop}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: %v, want %v", i, got[i], want[i])
		}
	}
	s := e.Stats()
	if s != (Stats{Packets: 6, Accepted: 4, Dropped: 2, Flows: 2}) {
		t.Errorf("Stats = %+v", s)
	}
	n := 0
	e.Flows(func(_ int, k flows.Key, fs FlowStats) bool {
		n++
		if fs != (FlowStats{Packets: 3, Accepted: 2, Dropped: 1}) {
			t.Errorf("flow %v: %+v", k, fs)
		}
		return true
	})
	if n != 2 {
		t.Errorf("Flows saw %d flows", n)
	}
}

func TestEngineMalformed(t *testing.T) {
	for _, v := range []Verdict{Accept, Drop} {
		e, err := NewPolicy(Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}}}, Malformed: v})
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		e.DecidePacket([]byte{0x45, 0, 0}, nil, t0, &d)
		if d.Verdict != v || d.Rule != -1 || !d.Malformed || d.Exceeded {
			t.Errorf("Malformed=%v: %+v", v, d)
		}
		if s := e.Stats(); s.Malformed != 1 || s.Packets != 1 || s.Flows != 0 {
			t.Errorf("Stats %+v", s)
		}
		e.DecidePacket(udp(1, 1, 8), nil, t0, &d)
		if d.Malformed || d.Rule != 0 {
			t.Errorf("Malformed=%v: a good packet after a malformed one: %+v", v, d)
		}
	}
}

func TestEngineBytes(t *testing.T) {
	// 8 kbit/s = 1000 B/s, burst 1500 B: a 1028-byte packet, then a
	// 428-byte one fit; a third doesn't.
	e := mustNew(t, Config{Rate: 1000, Bytes: true, Burst: 1500})
	big, small := udp(1, 1, 1000), udp(1, 1, 400)
	if e.Decide(big, t0) != Accept || e.Decide(small, t0) != Accept || e.Decide(small, t0) != Drop {
		t.Error("byte costs not charged by IP length")
	}
	// Default burst with a byte rate lets a 64 KiB packet through.
	e = mustNew(t, Config{Rate: 1000, Bytes: true})
	if e.Decide(udp(1, 1, 65000), t0) != Accept {
		t.Error("default byte burst below one large packet")
	}
}

func TestEngineConfigBounds(t *testing.T) {
	// A very high bit rate gets a default burst within the cap.
	if _, err := New(Config{Rate: 100e9 / 8, Bytes: true}); err != nil {
		t.Errorf("--bitrate 100gbit with the default burst: %v", err)
	}
	if _, err := New(Config{Rate: 1e6, Bytes: true, Burst: 1500}); err != nil {
		t.Errorf("a burst of one full-size packet: %v", err)
	}
}

// TestSlidingWindowExtremeTimes: times at the bottom of int64 (a capture
// with a wild timestamp offset) must not wrap the window's cut-off and let
// everything through.
func TestSlidingWindowExtremeTimes(t *testing.T) {
	l, _ := NewLimiter(LimiterConfig{Algorithm: SlidingWindow, Rate: 1, Window: sec})
	var s State
	now := int64(math.MinInt64)
	l.Reset(&s, now)
	if !l.Allow(&s, now, 1) || l.Allow(&s, now, 1) || l.Allow(&s, now+1, 1) {
		t.Error("sliding-window at MinInt64 does not hold its limit of 1")
	}
}

func TestEngineFlowExpiryResets(t *testing.T) {
	e := mustNew(t, Config{Rate: 0.001, Burst: 1, FlowTimeout: 10 * sec})
	p := udp(1, 1, 0)
	if e.Decide(p, t0) != Accept || e.Decide(p, t0+5*sec) != Drop {
		t.Fatal("burst 1 not enforced")
	}
	// Idle for more than the timeout: a new flow with a full bucket.
	if e.Decide(p, t0+16*sec) != Accept {
		t.Error("flow not forgotten after its timeout")
	}
	if e.Stats().Expired != 1 {
		t.Errorf("Expired = %d", e.Stats().Expired)
	}
}

// TestAppendFlows lists an engine's flows a few slots at a time, with
// packets in between, and checks each flow's counters, what is left of its
// bucket, and that an idle one shows as expired with a full bucket.
func TestAppendFlows(t *testing.T) {
	e := mustNew(t, Config{Rate: 10, Burst: 4, FlowTimeout: 10 * sec})
	const n = 50
	for i := range n {
		for range i % 7 { // flow i sends i%7 packets
			e.Decide(udp(i, 1000, 0), t0)
		}
	}
	now := t0 + 50*ms // half a token back
	var got []FlowInfo
	steps := 0
	for from := 0; from >= 0; steps++ {
		got, from = e.AppendFlows(got, 0, from, 4, now)
		e.Decide(udp(1000+steps, 1000, 0), now) // a new flow between steps
	}
	if steps < n/4 {
		t.Errorf("listed in %d steps of 4 slots, want at least %d", steps, n/4)
	}
	byKey := map[flows.Key]FlowInfo{}
	for _, f := range got {
		if _, dup := byKey[f.Key]; dup {
			t.Errorf("flow %v listed twice", f.Key)
		}
		byKey[f.Key] = f
	}
	var kc flows.KeyConfig
	for i := range n {
		sent := uint64(i % 7)
		if sent == 0 {
			continue
		}
		f, ok := byKey[kc.Key(decoded(udp(i, 1000, 0)))]
		acc := min(sent, 4)
		want := FlowStats{Packets: sent, Accepted: acc, Dropped: sent - acc}
		wantLeft := float64(4-acc) + 0.5
		if !ok || f.FlowStats != want || f.Rule != 0 || f.Last != t0 || f.Expired || math.Abs(f.Left-min(wantLeft, 4)) > 1e-9 {
			t.Errorf("flow %d: %+v (listed %v), want %+v, left %v", i, f, ok, want, min(wantLeft, 4))
		}
	}
	// Past the timeout: expired, a fresh flow's bucket.
	got, next := e.AppendFlows(got[:0], 0, 0, 1<<20, t0+11*sec)
	if next != -1 || len(got) < n {
		t.Fatalf("one call over every slot: next %d, %d flows", next, len(got))
	}
	for _, f := range got {
		if f.Last == t0 && (!f.Expired || f.Left != 4) {
			t.Errorf("idle flow %v: expired %v, left %v; want true, 4", f.Key, f.Expired, f.Left)
		}
	}
	// No allocation when dst has room.
	buf := make([]FlowInfo, 0, 1<<10)
	if a := testing.AllocsPerRun(20, func() { e.AppendFlows(buf, 0, 0, 1<<10, now) }); a != 0 {
		t.Errorf("AppendFlows into a large enough dst: %v allocations", a)
	}
	// A rule without a table has no flows.
	acc, err := NewPolicy(Policy{Rules: []Rule{{Name: "a", Action: ActionAccept}}})
	if err != nil {
		t.Fatal(err)
	}
	if fl, next := acc.AppendFlows(nil, 0, 0, 10, now); len(fl) != 0 || next != -1 {
		t.Errorf("accept rule: %d flows, next %d", len(fl), next)
	}
}

// decoded decodes a packet.
func decoded(b []byte) *flows.Packet {
	var p flows.Packet
	p.Decode(b)
	return &p
}

func TestEngineConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Rate: 1, Bytes: true, Algorithm: SlidingWindow},
		{Rate: 1, MaxFlows: -1},
		{Rate: 1, Key: flows.KeyConfig{SrcPrefix4: 33}},
		{Rate: 1e6, Bytes: true, Burst: 1000},                                               // burst below a full-size packet
		{Rate: 62500, Bytes: true, Algorithm: FixedWindow, Window: int64(time.Millisecond)}, // 62 bytes per window
		{Rate: 5000, Algorithm: SlidingWindow, MaxFlows: 1 << 20},                           // 40 GiB of logs
		{Rate: 1, Key: flows.KeyConfig{Symmetric: true, SrcPrefix4: 24}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestDecideNoAllocs: zero allocations per Decide, for each algorithm,
// for known flows, new flows evicting old ones, and malformed packets.
func TestDecideNoAllocs(t *testing.T) {
	pkts := make([][]byte, 5000)
	for i := range pkts {
		pkts[i] = udp(i, 1, 8)
	}
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		e := mustNew(t, Config{Algorithm: algo, Rate: 100, MaxFlows: 1000})
		now := t0
		for _, p := range pkts {
			e.Decide(p, now) // fill the table
		}
		i := 0
		if n := testing.AllocsPerRun(20000, func() {
			now += 1000
			e.Decide(pkts[i%len(pkts)], now) // churns through a full table
			i++
		}); n != 0 {
			t.Errorf("%v: %v allocs per Decide", algo, n)
		}
		if n := testing.AllocsPerRun(100, func() { e.Decide([]byte{0x60, 1}, now) }); n != 0 {
			t.Errorf("%v malformed: %v allocs per Decide", algo, n)
		}
	}
}

// ruleByDport is a test Classifier: rule i matches UDP destination port
// ports[i]; a NoPorts packet matches rule noPorts.
type ruleByDport struct {
	ports   []uint16
	noPorts int
}

func (c ruleByDport) Classify(p *flows.Packet, _ *Meta) int {
	if p.NoPorts {
		return c.noPorts
	}
	for i, port := range c.ports {
		if p.DstPort == port {
			return i
		}
	}
	return -1
}

// udpTo is udp(i, sport, 8) sent to destination port dport.
func udpTo(i int, sport, dport uint16) []byte {
	b := udp(i, sport, 8)
	binary.BigEndian.PutUint16(b[22:], dport)
	return b
}

func mustPolicy(t testing.TB, p Policy) *Engine {
	t.Helper()
	e, err := NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPolicyActions(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules: []Rule{
			{Name: "allow", Action: ActionAccept},
			{Name: "deny", Action: ActionDrop},
			{Name: "limit", Limit: Config{Rate: 1, Burst: 2}},
			{Name: "trial", Limit: Config{Rate: 1, Burst: 2}, Shadow: true},
			{Name: "mark", Limit: Config{Rate: 1, Burst: 2}, MarkExceeded: true, Mark: 0x1, MarkMask: 0x1},
		},
		Classifier: ruleByDport{ports: []uint16{22, 23, 53, 80, 443}, noPorts: 2},
	})
	type step struct {
		dport   uint16
		mark    uint32
		want    Verdict
		setMark bool
		newMark uint32
		rule    int
	}
	steps := []step{
		{22, 0, Accept, false, 0, 0}, {22, 0, Accept, false, 0, 0}, {22, 0, Accept, false, 0, 0},
		{23, 0, Drop, false, 0, 1},
		{53, 0, Accept, false, 0, 2}, {53, 0, Accept, false, 0, 2}, {53, 0, Drop, false, 0, 2},
		{80, 0, Accept, false, 0, 3}, {80, 0, Accept, false, 0, 3}, {80, 0, Accept, false, 0, 3}, // shadow: would drop
		{443, 0xf0, Accept, false, 0, 4}, {443, 0xf0, Accept, false, 0, 4}, {443, 0xf0, Accept, true, 0xf1, 4},
		{443, 0xf1, Accept, true, 0xf1, 4},
		{9999, 0, Accept, false, 0, -1}, // unmatched
	}
	// Over the limit: the limit rule's drop, the shadow drop, the marks.
	exceeded := map[int]bool{6: true, 9: true, 12: true, 13: true}
	var d Decision // reused: every field is rewritten
	for i, s := range steps {
		e.DecidePacket(udpTo(1, 1000, s.dport), &Meta{Mark: s.mark}, t0, &d)
		if d.Verdict != s.want || d.SetMark != s.setMark || (s.setMark && d.Mark != s.newMark) || d.Rule != s.rule {
			t.Errorf("step %d: dport %d: %+v, want verdict %v setMark %v mark %#x rule %d", i, s.dport, d, s.want, s.setMark, s.newMark, s.rule)
		}
		if d.Exceeded != exceeded[i] || d.Malformed {
			t.Errorf("step %d: dport %d: Exceeded %v Malformed %v, want %v false", i, s.dport, d.Exceeded, d.Malformed, exceeded[i])
		}
	}
	want := []RuleStats{
		{Packets: 3, Accepted: 3},
		{Packets: 1, Dropped: 1},
		{Packets: 3, Accepted: 2, Dropped: 1, Flows: 1},
		{Packets: 3, Accepted: 3, ShadowDropped: 1, Flows: 1},
		{Packets: 4, Accepted: 4, Marked: 2, Flows: 1},
	}
	for i, w := range want {
		if got := e.RuleStats(i); got != w {
			t.Errorf("rule %s: %+v, want %+v", e.Rule(i).Name, got, w)
		}
	}
	s := e.Stats()
	if s.Packets != 15 || s.Accepted != 13 || s.Dropped != 2 || s.Unmatched != 1 || s.Flows != 3 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestPolicyNoPorts: a packet whose ports cannot be read is counted and
// limited as its address-and-protocol flow.
func TestPolicyNoPorts(t *testing.T) {
	e := mustPolicy(t, Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1, Burst: 1}}}})
	frag := udp(1, 1000, 8)
	frag[6], frag[7] = 0, 10 // fragment offset 80 bytes
	for i, want := range []Verdict{Accept, Drop, Drop} {
		var d Decision
		e.DecidePacket(frag, nil, t0, &d)
		if d.Verdict != want || d.Key.SrcPort != 0 || d.Key.Proto != flows.ProtoUDP {
			t.Errorf("fragment %d: %+v, want %v keyed by address and protocol", i, d, want)
		}
	}
	if s := e.Stats(); s.NoPorts != 3 || s.Malformed != 0 || s.Dropped != 2 {
		t.Errorf("Stats = %+v, want 3 no_ports, 2 dropped", s)
	}
}

// TestReloadKeepsState: an unchanged rule keeps its flows (no fresh burst),
// a changed one starts empty, and counters go on.
func TestReloadKeepsState(t *testing.T) {
	pol := func(dnsRate float64, webShadow bool) Policy {
		return Policy{
			Rules: []Rule{
				{Name: "dns", Match: "udp 53", Limit: Config{Rate: dnsRate, Burst: 2}},
				{Name: "web", Match: "udp 80", Limit: Config{Rate: 1, Burst: 2}, Shadow: webShadow},
			},
			Classifier: ruleByDport{ports: []uint16{53, 80}},
		}
	}
	e := mustPolicy(t, pol(1, false))
	dns, web := udpTo(1, 1000, 53), udpTo(1, 1000, 80)
	for i := 0; i < 3; i++ {
		e.Decide(dns, t0)
		e.Decide(web, t0)
	}
	// Same policy: both keep their empty buckets.
	e2, kept, err := e.Reload(pol(1, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 2 {
		t.Errorf("kept %v, want both rules", kept)
	}
	if e2.Decide(dns, t0) != Drop || e2.Decide(web, t0) != Drop {
		t.Error("an unchanged rule got a fresh burst after reload")
	}
	// dns changes its rate: it starts afresh; web only flips to shadow
	// mode, which keeps state.
	e3, kept, err := e2.Reload(pol(2, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0] != "web" {
		t.Errorf("kept %v, want [web]", kept)
	}
	if e3.Decide(dns, t0) != Accept {
		t.Error("a changed rule kept its old state")
	}
	var d Decision
	e3.DecidePacket(web, nil, t0, &d)
	if d.Verdict != Accept || e3.RuleStats(1).ShadowDropped != 1 {
		t.Errorf("web in shadow mode after reload: %+v, %+v", d, e3.RuleStats(1))
	}
	if s := e3.Stats(); s.Packets != 10 {
		t.Errorf("engine counters did not go on: %+v", s)
	}
	if got := e3.RuleStats(1).Packets; got != 5 {
		t.Errorf("kept rule's packets = %d, want 5", got)
	}
	if _, _, err := e3.Reload(Policy{}); err == nil {
		t.Error("reload to an empty policy succeeded")
	}
}

// TestOffloadReports: after OffloadAfter drops in a row a flow's exact
// 5-tuple is reported once per run; accepted packets reset the run; shadow
// rules never report.
func TestOffloadReports(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules: []Rule{
			{Name: "src", Limit: Config{Rate: 1, Burst: 1, Key: flows.KeyConfig{Mode: flows.Src, SrcPrefix4: 24}}},
			{Name: "trial", Limit: Config{Rate: 1, Burst: 1}, Shadow: true},
		},
		Classifier:   ruleByDport{ports: []uint16{9000, 80}},
		OffloadAfter: 10,
	})
	p := udpTo(5, 4242, 9000)
	var got []flows.Key
	var lims []OffloadLimit
	take := func() {
		e.TakeOffloads(func(k flows.Key, l OffloadLimit) { got, lims = append(got, k), append(lims, l) })
	}
	for i := 0; i < 10; i++ { // 1 accepted, 9 dropped
		e.Decide(p, t0)
	}
	take()
	if len(got) != 0 {
		t.Fatalf("reported after 9 drops: %v", got)
	}
	e.Decide(p, t0) // 10th drop
	take()
	if len(got) != 1 {
		t.Fatalf("%d reports after 10 drops, want 1", len(got))
	}
	k := got[0]
	if k.Mode != flows.FiveTuple || k.SrcPort != 4242 || k.DstPort != 9000 || k.Proto != flows.ProtoUDP || k.Src[3] != 5 {
		t.Errorf("reported %+v, want the packet's exact 5-tuple", k)
	}
	if lims[0] != (OffloadLimit{Rate: 1 * OffloadHeadroom, Burst: 1}) {
		t.Errorf("reported limit %+v, want the rule's with the headroom: rate 1 × %v, burst 1, packets", lims[0], OffloadHeadroom)
	}
	for i := 0; i < 100; i++ {
		e.Decide(udpTo(6, 1, 80), t0)
	}
	got = got[:0]
	take()
	if len(got) != 0 {
		t.Errorf("a shadow rule reported %v", got)
	}
	if s := e.Stats(); s.Offloads != 1 {
		t.Errorf("Offloads = %d", s.Offloads)
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, p := range []Policy{
		{},
		{Rules: []Rule{{Name: "a", Limit: Config{Rate: 1}}, {Name: "b", Limit: Config{Rate: 1}}}}, // no classifier
		{Rules: []Rule{{Name: "a", Limit: Config{Rate: 1}}}, Malformed: 7},
		{Rules: []Rule{{Name: "a", Action: 9}}},
		{Rules: []Rule{{Name: "a"}}}, // limit without a rate
	} {
		if _, err := NewPolicy(p); err == nil {
			t.Errorf("NewPolicy(%+v) succeeded", p)
		}
	}
}

// TestPolicyNoAllocs: a multi-rule engine with a classifier decides without
// allocating.
func TestPolicyNoAllocs(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules:        []Rule{{Name: "a", Action: ActionAccept}, {Name: "b", Limit: Config{Rate: 10, MaxFlows: 100}, MarkExceeded: true, Mark: 1, MarkMask: 1}},
		Classifier:   ruleByDport{ports: []uint16{22, 9000}},
		OffloadAfter: 2,
	})
	pkts := make([][]byte, 500)
	for i := range pkts {
		pkts[i] = udpTo(i, 1, []uint16{22, 9000, 7}[i%3])
	}
	m := &Meta{Mark: 4}
	var d Decision
	now := t0
	i := 0
	if n := testing.AllocsPerRun(5000, func() {
		now += 1000
		e.DecidePacket(pkts[i%len(pkts)], m, now, &d)
		i++
	}); n != 0 {
		t.Errorf("%v allocs per DecidePacket", n)
	}
}

// TestRetireKeepsCounts: evictions of a rule that a reload changes still
// count in the engine's totals (counters never go down).
func TestRetireKeepsCounts(t *testing.T) {
	pol := func(rate float64) Policy {
		return Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: rate, MaxFlows: 10}}}}
	}
	e := mustPolicy(t, pol(1))
	for i := 0; i < 100; i++ {
		e.Decide(udp(i, 1, 8), t0)
	}
	before := e.Stats().Evictions
	if before == 0 {
		t.Fatal("no evictions")
	}
	e2, kept, err := e.Reload(pol(2))
	if err != nil || len(kept) != 0 {
		t.Fatalf("reload: %v, kept %v", err, kept)
	}
	e2.Retire(e)
	if got := e2.Stats().Evictions; got != before {
		t.Errorf("evictions after the rule changed: %d, want %d (never down)", got, before)
	}
}

// TestEmptyRuleCost: a limiting rule no packet has reached costs little (its
// flow table's first entries come with its first flow), so a policy of
// thousands of rules does not take megabytes per queue before traffic.
func TestEmptyRuleCost(t *testing.T) {
	const n = 4096
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = Rule{Name: fmt.Sprint("r", i), Limit: Config{Rate: 10}}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := mustPolicy(t, Policy{Rules: rules, Classifier: ruleByDport{}})
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per empty limiting rule", per)
	if per > 4096 {
		t.Errorf("%.0f bytes per empty limiting rule, want under 4 KiB", per)
	}
	runtime.KeepAlive(e)
}

// TestOffloadLimit: the kernel's bucket for an offloaded flow is never
// stricter than its rule's limiter.
func TestOffloadLimit(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want OffloadLimit
	}{
		{Config{Rate: 100, Burst: 20}, OffloadLimit{Rate: 125, Burst: 20}},
		{Config{Rate: 100}, OffloadLimit{Rate: 125, Burst: DefaultBurstPackets}},
		{Config{Rate: 1e6, Burst: 5e4, Bytes: true}, OffloadLimit{Rate: 1.25e6, Burst: 5e4, Bytes: true}},
		{Config{Rate: 100, Burst: 10, Shape: true, MaxDelay: int64(time.Second / 2)}, OffloadLimit{Rate: 125, Burst: 60}},
		{Config{Algorithm: FixedWindow, Rate: 10, Window: int64(2 * time.Second)}, OffloadLimit{Rate: 12.5, Burst: 40}},
		{Config{Algorithm: SlidingWindowCounter, Rate: 1000, Bytes: true, Window: int64(time.Second)}, OffloadLimit{Rate: 1250, Burst: 2000, Bytes: true}},
	} {
		if got := offloadLimit(c.cfg.LimiterConfig(), c.cfg.Bytes); got != c.want {
			t.Errorf("%+v: offload limit %+v, want %+v", c.cfg, got, c.want)
		}
	}
}
