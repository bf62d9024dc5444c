package policy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// refL4 is ref's check of tcp-flags, icmp-type, length, dscp and
// ct-state, field by field as the schema's help says.
func refL4(s *matchSpec, accept, meetsUnknown bool, p *flows.Packet, m *shaper.Meta) bool {
	v6 := p.Class == flows.IPv6
	if s.tcpFlags != nil {
		switch {
		case p.Proto == flows.ProtoTCP && p.HasL4:
			ok := false
			for _, f := range s.tcpFlags {
				ok = ok || p.TCPFlags&f.mask == f.val
			}
			if !ok {
				return false
			}
		case p.Proto == flows.ProtoTCP || p.Proto == flows.ProtoUnknown:
			if !meetsUnknown {
				return false
			}
		default:
			return false
		}
	}
	if s.icmp != nil {
		switch {
		case p.Proto == flows.ProtoICMP && !v6 || p.Proto == flows.ProtoICMPv6 && v6:
			if p.HasL4 && !s.icmp.has(b2i(v6), int(p.ICMPType)) || !p.HasL4 && !meetsUnknown {
				return false
			}
		case p.Proto == flows.ProtoUnknown:
			if !meetsUnknown {
				return false
			}
		default:
			return false
		}
	}
	if s.length != nil && !slices.ContainsFunc(s.length, func(r idRange) bool { return int(r.lo) <= p.Length && p.Length <= int(r.hi) }) {
		return false
	}
	if s.hasDSCP && s.dscp&(1<<p.DSCP) == 0 {
		return false
	}
	if s.ct != 0 {
		if m.CtState == 0 {
			return !accept
		}
		if s.ct&m.CtState == 0 {
			return false
		}
	}
	return true
}

var (
	randFlags  = []string{"syn", "syn/syn,ack", "ack/ack", "rst/rst", "none/fin,syn,rst,psh,ack,urg", "fin,syn/fin,syn", "0x12/0x12"}
	randICMP   = []string{"echo-request", "echo-reply", "destination-unreachable", "8", "icmpv6:135", "icmp:3", "packet-too-big", "timestamp-request"}
	randLength = []string{"0-60", "40", "64-128", "1500", "1000-65535", "70000"}
	randDSCP   = []string{"ef", "af41", "cs0", "cs1", "10", "63", "le"}
	randCt     = []string{"new", "established", "related", "invalid", "untracked"}
)

func randomL4Fields(rng *rand.Rand) []string {
	var fields []string
	pick := func(from []string, max int) string {
		k := 1 + rng.IntN(max)
		items := make([]string, k)
		for i := range items {
			items[i] = `"` + from[rng.IntN(len(from))] + `"`
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	if rng.IntN(6) == 0 {
		fields = append(fields, "tcp-flags = "+pick(randFlags, 2))
	}
	if rng.IntN(6) == 0 {
		fields = append(fields, "icmp-type = "+pick(randICMP, 3))
	}
	if rng.IntN(6) == 0 {
		fields = append(fields, "length = "+pick(randLength, 2))
	}
	if rng.IntN(6) == 0 {
		fields = append(fields, "dscp = "+pick(randDSCP, 2))
	}
	if rng.IntN(5) == 0 {
		fields = append(fields, "ct-state = "+pick(randCt, 2))
	}
	return fields
}

func randomL4(rng *rand.Rand, p *flows.Packet, m *shaper.Meta) {
	p.DSCP = []uint8{0, 46, 34, 8, 10, 63, 1, 12}[rng.IntN(8)]
	p.Length = []int{40, 60, 61, 64, 100, 128, 129, 1500, 65535, 70000}[rng.IntN(10)]
	switch p.Proto {
	case flows.ProtoTCP:
		p.HasL4 = !p.NoPorts && rng.IntN(6) != 0
		if p.HasL4 {
			p.TCPFlags = []uint8{0x02, 0x12, 0x10, 0x18, 0x04, 0x14, 0x01, 0x11, 0x03, 0}[rng.IntN(10)]
		}
	case flows.ProtoICMP, flows.ProtoICMPv6:
		p.HasL4 = !p.NoPorts && rng.IntN(6) != 0
		if p.HasL4 {
			p.ICMPType = []uint8{0, 8, 3, 128, 129, 1, 2, 135, 13}[rng.IntN(9)]
		}
	}
	if rng.IntN(4) != 0 {
		m.CtState = shaper.CtState(rng.IntN(32))
	}
}

// TestL4Classify: each field's spellings against packets built for it.
func TestL4Classify(t *testing.T) {
	c := mustCompile(t, ruleTable("syn", `tcp-flags = ["syn"], dport = [22]`, `pps = 1`)+
		ruleTable("rst", `tcp-flags = ["rst/rst"]`, dropAction)+
		ruleTable("ping", `icmp-type = ["echo-request"]`, `pps = 10`)+
		ruleTable("unreach4", `icmp-type = ["icmp:3", 129]`, acceptAction)+
		ruleTable("small", `length = ["0-60"], proto = ["udp"]`, `pps = 100`)+
		ruleTable("voice", `dscp = ["ef", 34]`, acceptAction)+
		ruleTable("new", `ct-state = ["new", "related"]`, `pps = 3`)+
		ruleTable("bad", `ct-state = ["invalid"]`, dropAction), Options{})
	cl := c.Policy().Classifier
	tcp := func(flags uint8, dport uint16) *flows.Packet {
		return &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoTCP, HasL4: true, TCPFlags: flags, DstPort: dport, Length: 100}
	}
	icmp := func(v6 bool, typ uint8) *flows.Packet {
		p := &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoICMP, HasL4: true, ICMPType: typ, Length: 100}
		if v6 {
			p.Class, p.Proto = flows.IPv6, flows.ProtoICMPv6
		}
		return p
	}
	est := &shaper.Meta{CtState: shaper.CtEstablished}
	for _, tt := range []struct {
		name string
		p    *flows.Packet
		m    *shaper.Meta
		want int
	}{
		{"syn to 22", tcp(flows.TCPSyn, 22), est, 0},
		{"syn+ecn to 22", tcp(flows.TCPSyn|flows.TCPEce|flows.TCPCwr, 22), est, 0},
		{"syn-ack to 22", tcp(flows.TCPSyn|flows.TCPAck, 22), est, -1},
		{"syn-fin to 22", tcp(flows.TCPSyn|flows.TCPFin, 22), est, -1},
		{"syn to 80", tcp(flows.TCPSyn, 80), est, -1},
		{"rst-ack", tcp(flows.TCPRst|flows.TCPAck, 80), est, 1},
		{"echo request", icmp(false, 8), est, 2},
		{"icmpv6 echo request", icmp(true, 128), est, 2},
		{"icmpv6 type 8 is not a request", icmp(true, 8), est, -1},
		{"icmp unreachable", icmp(false, 3), est, 3},
		{"icmpv6 type 3 is not icmp:3", icmp(true, 3), est, -1},
		{"icmp 129", icmp(false, 129), est, 3},
		{"icmpv6 129", icmp(true, 129), est, 3},
		{"ICMP in IPv6 has no type", &flows.Packet{Class: flows.IPv6, Proto: flows.ProtoICMP, HasL4: true, ICMPType: 8}, est, -1},
		{"hidden flags meet the limit rule", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoTCP, DstPort: 22, Length: 100}, est, 0},
		{"hidden type meets the limit rule", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoICMP, NoPorts: true, Length: 100}, est, 2},
		{"small udp", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 60}, est, 4},
		{"61-byte udp", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 61}, est, -1},
		{"ef", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100, DSCP: 46}, est, 5},
		{"af41", &flows.Packet{Class: flows.IPv6, Proto: flows.ProtoUDP, Length: 100, DSCP: 34}, est, 5},
		{"new", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100}, &shaper.Meta{CtState: shaper.CtNew}, 6},
		{"related", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100}, &shaper.Meta{CtState: shaper.CtRelated}, 6},
		{"invalid or untracked (live)", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100}, &shaper.Meta{CtState: shaper.CtInvalid | shaper.CtUntracked}, 7},
		{"untracked", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100}, &shaper.Meta{CtState: shaper.CtUntracked}, -1},
		{"state unknown: the first limit rule", &flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, Length: 100}, nil, 6},
	} {
		if got := cl.Classify(tt.p, tt.m); got != tt.want {
			t.Errorf("%s: rule %d, want %d", tt.name, got, tt.want)
		}
	}
	rules := c.Policy().Rules
	for i, want := range []string{"dport=22 tcp-flags=syn", "tcp-flags=rst/rst", "icmp-type=echo-request", "icmp-type=icmp:3,129",
		"proto=udp length=0-60", "dscp=af41,ef", "ct-state=new,related", "ct-state=invalid"} {
		if rules[i].Match != want {
			t.Errorf("rule %d's canonical match %q, want %q", i, rules[i].Match, want)
		}
	}
}

// TestL4Errors: every field's errors, at their place.
func TestL4Errors(t *testing.T) {
	for _, tt := range []struct{ match, want string }{
		{`tcp-flags = ["ack"]`, `p.toml:4:24: rule "a": match.tcp-flags: bad tcp flags "ack": want "syn" or FLAGS/MASK`},
		{`tcp-flags = ["syn/ack"]`, `syn are set but not in the mask`},
		{`tcp-flags = ["syn/bogus"]`, `the mask "bogus" is not a list of flags`},
		{`tcp-flags = ["syn"], proto = ["udp"]`, `match.tcp-flags: never matches: match.proto has no tcp`},
		{`icmp-type = ["echo"]`, `bad icmp type "echo"`},
		{`icmp-type = [256]`, `bad icmp type "256"`},
		{`icmp-type = ["icmp6:1"]`, `bad icmp type "icmp6:1"`},
		{`icmp-type = [8], proto = ["tcp"]`, `never matches: match.proto has neither icmp nor icmpv6`},
		{`length = ["100-50"]`, `bad length "100-50"`},
		{`dscp = [64]`, `bad dscp "64"`},
		{`dscp = ["af44"]`, `bad dscp "af44"`},
		{`ct-state = ["NEW", "closed"]`, `p.toml:4:30: rule "a": match.ct-state: bad connection state "closed": want new, established, related, invalid, untracked`},
		{`ct-state = []`, `match.ct-state: empty list`},
	} {
		src := "[[rule]]\nname = \"a\"\npps = 1\nmatch = { " + tt.match + " }\n"
		_, err := Parse("p.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.match, err, tt.want)
		}
	}
}
