package policy

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// The matches on header fields past the addresses and ports, and on the
// connection's state: tcp-flags, icmp-type, length, dscp and ct-state. Each
// is a dimension of the classifier looked up by a table indexed by the
// packet's value (flags byte, ICMP type, DSCP, state bits) or, for
// lengths, by binary search over interval bounds: one load per packet.

// flagPair is a tcp-flags item: the flags under mask must be val.
type flagPair struct{ val, mask uint8 }

// synPair is iptables' --syn: SYN set, ACK, RST and FIN clear.
var synPair = flagPair{flows.TCPSyn, flows.TCPSyn | flows.TCPAck | flows.TCPRst | flows.TCPFin}

// tcpFlagNames are the flags by bit, low to high.
var tcpFlagNames = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

// parseFlagList parses "syn,ack" (names or a number 0-255, as iptables'
// and nft's flag lists).
func parseFlagList(s string) (uint8, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(s, 0, 8); err == nil {
		return uint8(n), true
	}
	var v uint8
	for _, f := range strings.Split(s, ",") {
		i := slices.Index(tcpFlagNames[:], strings.ToLower(strings.TrimSpace(f)))
		if i < 0 {
			return 0, false
		}
		v |= 1 << i
	}
	return v, true
}

// parseTCPFlags parses a tcp-flags item: "syn" (SYN set, ACK, RST and FIN
// clear: iptables' --syn) or "FLAGS/MASK": of the flags in MASK, exactly
// those in FLAGS are set ("syn/syn,ack": SYN without ACK; "rst/rst": RST
// set).
func parseTCPFlags(s string) (flagPair, error) {
	if strings.EqualFold(s, "syn") {
		return synPair, nil
	}
	f, m, ok := strings.Cut(s, "/")
	if !ok {
		return flagPair{}, fmt.Errorf("bad tcp flags %q: want \"syn\" or FLAGS/MASK, such as \"syn/syn,ack\" (flags: %s)", s, strings.Join(tcpFlagNames[:], ", "))
	}
	var val, mask uint8
	if f != "" && f != "0" && f != "none" {
		if val, ok = parseFlagList(f); !ok {
			return flagPair{}, fmt.Errorf("bad tcp flags %q: %q is not a list of flags (%s)", s, f, strings.Join(tcpFlagNames[:], ", "))
		}
	}
	if mask, ok = parseFlagList(m); !ok || mask == 0 {
		return flagPair{}, fmt.Errorf("bad tcp flags %q: the mask %q is not a list of flags (%s)", s, m, strings.Join(tcpFlagNames[:], ", "))
	}
	if val&^mask != 0 {
		return flagPair{}, fmt.Errorf("bad tcp flags %q: %s are set but not in the mask: it would match nothing", s, flagText(val&^mask))
	}
	return flagPair{val, mask}, nil
}

func flagText(v uint8) string {
	if v == 0 {
		return "none"
	}
	var out []string
	for i := 7; i >= 0; i-- {
		if v&(1<<i) != 0 {
			out = append(out, tcpFlagNames[i])
		}
	}
	return strings.Join(out, ",")
}

func (p flagPair) String() string {
	if p == synPair {
		return "syn"
	}
	return flagText(p.val) + "/" + flagText(p.mask)
}

// icmpName is an ICMP message type by name: its ICMP (IPv4) and ICMPv6
// types, -1 where the family has none.
type icmpName struct {
	name   string
	v4, v6 int
}

// icmpNames are the names icmp-type takes, as iptables and nft spell them.
var icmpNames = []icmpName{
	{"echo-request", 8, 128}, {"echo-reply", 0, 129},
	{"destination-unreachable", 3, 1}, {"time-exceeded", 11, 3}, {"parameter-problem", 12, 4},
	{"redirect", 5, 137}, {"router-advertisement", 9, 134}, {"router-solicitation", 10, 133},
	{"source-quench", 4, -1}, {"timestamp-request", 13, -1}, {"timestamp-reply", 14, -1},
	{"info-request", 15, -1}, {"info-reply", 16, -1}, {"address-mask-request", 17, -1}, {"address-mask-reply", 18, -1},
	{"packet-too-big", -1, 2}, {"mld-listener-query", -1, 130}, {"mld-listener-report", -1, 131},
	{"mld-listener-done", -1, 132}, {"neighbor-solicitation", -1, 135}, {"neighbor-advertisement", -1, 136},
	{"mld2-listener-report", -1, 143},
}

// icmpSet is the ICMP types of a match, by family: [0] ICMP in IPv4, [1]
// ICMPv6 in IPv6.
type icmpSet [2][4]uint64

func (s *icmpSet) add(fam, typ int) { s[fam][typ>>6] |= 1 << (typ & 63) }
func (s *icmpSet) has(fam, typ int) bool {
	return s[fam][typ>>6]&(1<<(typ&63)) != 0
}

// parseICMPType adds an icmp-type item to set: a name (both families'
// types of it), a number 0-255 (that type in ICMP and in ICMPv6), or
// "icmp:N" / "icmpv6:N" (one family's).
func parseICMPType(s string, set *icmpSet) error {
	l := strings.ToLower(s)
	for _, n := range icmpNames {
		if n.name == l {
			if n.v4 >= 0 {
				set.add(0, n.v4)
			}
			if n.v6 >= 0 {
				set.add(1, n.v6)
			}
			return nil
		}
	}
	fams := []int{0, 1}
	num := l
	if p, rest, ok := strings.Cut(l, ":"); ok {
		switch p {
		case "icmp":
			fams = []int{0}
		case "icmpv6":
			fams = []int{1}
		default:
			fams = nil
		}
		num = rest
	}
	n, err := strconv.ParseUint(num, 10, 8)
	if err != nil || fams == nil || num == "" || num[0] == '+' {
		return fmt.Errorf("bad icmp type %q: want a name (echo-request, destination-unreachable, ...), a number 0-255 (the type in ICMP and ICMPv6), or icmp:N or icmpv6:N", s)
	}
	for _, f := range fams {
		set.add(f, int(n))
	}
	return nil
}

// items writes set canonically: the names whose types it holds all (in
// icmpNames' order), then the types left, as N (both families), icmp:N or
// icmpv6:N.
func (s icmpSet) items() []string {
	var out []string
	left := s
	for _, n := range icmpNames {
		if (n.v4 < 0 || s.has(0, n.v4)) && (n.v6 < 0 || s.has(1, n.v6)) {
			out = append(out, n.name)
			if n.v4 >= 0 {
				left[0][n.v4>>6] &^= 1 << (n.v4 & 63)
			}
			if n.v6 >= 0 {
				left[1][n.v6>>6] &^= 1 << (n.v6 & 63)
			}
		}
	}
	for t := range 256 {
		switch a, b := left.has(0, t), left.has(1, t); {
		case a && b:
			out = append(out, strconv.Itoa(t))
		case a:
			out = append(out, "icmp:"+strconv.Itoa(t))
		case b:
			out = append(out, "icmpv6:"+strconv.Itoa(t))
		}
	}
	return out
}

// dscpNames are the DSCP class names (RFC 2474, 2597, 3246, 5865, 8622).
var dscpNames = func() map[string]uint8 {
	m := map[string]uint8{"ef": 46, "va": 44, "le": 1}
	for c := range 8 {
		m["cs"+strconv.Itoa(c)] = uint8(c * 8)
	}
	for x := 1; x <= 4; x++ {
		for y := 1; y <= 3; y++ {
			m[fmt.Sprintf("af%d%d", x, y)] = uint8(8*x + 2*y)
		}
	}
	return m
}()

// parseDSCP parses a dscp item: a number 0-63 or a class name.
func parseDSCP(s string) (uint8, error) {
	if v, ok := dscpNames[strings.ToLower(s)]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(s, 0, 8)
	if err != nil || n > 63 || s == "" || s[0] == '+' {
		return 0, fmt.Errorf("bad dscp %q: want a number 0-63 or a class name (ef, af11-af43, cs0-cs7, va, le)", s)
	}
	return uint8(n), nil
}

// dscpName is the class name of v, or its number.
func dscpName(v uint8) string {
	best := ""
	for n, x := range dscpNames {
		// cs0 before le's number; the shortest name else.
		if x == v && (best == "" || len(n) < len(best) || len(n) == len(best) && n < best) {
			best = n
		}
	}
	if best == "" {
		return strconv.Itoa(int(v))
	}
	return best
}

// parseCtState parses a ct-state item into its bit.
func parseCtState(s string) (shaper.CtState, error) {
	if i := slices.Index(shaper.CtStates[:], strings.ToLower(s)); i >= 0 {
		return 1 << i, nil
	}
	return 0, fmt.Errorf("bad connection state %q: want %s", s, strings.Join(shaper.CtStates[:], ", "))
}

func ctItems(m shaper.CtState) []string {
	var out []string
	for i, n := range shaper.CtStates {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// parseLength parses a length item: an IP length in bytes or a "lo-hi"
// range of them.
func parseLength(s string) (idRange, error) {
	r, err := parseIDs(s)
	if err != nil {
		return idRange{}, fmt.Errorf("bad length %q: want a number of bytes or a range such as \"0-128\"", s)
	}
	return r, nil
}

// checkL4 checks the tcp-flags, icmp-type, length, dscp and ct-state
// items of m into s (bad reports an error at an item, list as checkMatch's).
func checkL4(m *Match, s *matchSpec, bad badFunc, list listFunc) {
	s.tcpFlags = parseItems(list, bad, "match.tcp-flags", m.TCPFlags, parseTCPFlags)
	if m.ICMPType != nil {
		s.icmp = new(icmpSet)
	}
	list("match.icmp-type", m.ICMPType, func(j int, v string) {
		if err := parseICMPType(v, s.icmp); err != nil {
			bad("match.icmp-type", j, "%w", err)
		}
	})
	s.length = parseItems(list, bad, "match.length", m.Length, parseLength)
	if m.DSCP != nil {
		s.hasDSCP = true
	}
	for _, d := range parseItems(list, bad, "match.dscp", m.DSCP, parseDSCP) {
		s.dscp |= 1 << d
	}
	for _, c := range parseItems(list, bad, "match.ct-state", m.CtState, parseCtState) {
		s.ct |= c
	}
	// A protocol list that excludes what the field needs never matches.
	if len(s.proto) > 0 && len(s.proto) == len(m.Proto) {
		if m.TCPFlags != nil && !slices.Contains(s.proto, flows.ProtoTCP) {
			bad("match.tcp-flags", -1, "never matches: match.proto has no tcp")
		}
		if m.ICMPType != nil && !slices.Contains(s.proto, flows.ProtoICMP) && !slices.Contains(s.proto, flows.ProtoICMPv6) {
			bad("match.icmp-type", -1, "never matches: match.proto has neither icmp nor icmpv6")
		}
	}
}

// canonicalL4 writes the fields of s into m in canonical form.
func canonicalL4(s *matchSpec, m *Match) {
	if s.tcpFlags != nil {
		ps := slices.Clone(s.tcpFlags)
		slices.SortFunc(ps, func(a, b flagPair) int {
			if a.mask != b.mask {
				return int(a.mask) - int(b.mask)
			}
			return int(a.val) - int(b.val)
		})
		for _, p := range slices.Compact(ps) {
			m.TCPFlags = append(m.TCPFlags, p.String())
		}
	}
	if s.icmp != nil {
		m.ICMPType = s.icmp.items()
	}
	if s.length != nil {
		m.Length = rangeList(s.length, idBounds)
	}
	if s.hasDSCP {
		for d := s.dscp; d != 0; d &= d - 1 {
			m.DSCP = append(m.DSCP, dscpName(uint8(bits.TrailingZeros64(d))))
		}
	}
	if s.ct != 0 {
		m.CtState = ctItems(s.ct)
	}
}

// byteDim is a dimension looked up by a byte of the packet (TCP flags,
// ICMP type by family, DSCP, connection state bits): offs[value]. none:
// the packet has no such field (another protocol); unknown and frag: it
// may have, hidden (cut short; a later fragment), as portDim's.
type byteDim struct {
	on                  bool
	none, unknown, frag int32
	offs                []int32
}

// l4Lookups writes the classes of p's tcp-flags, icmp-type, length, dscp
// and ct-state to offs from n on and returns the new n.
func (c *classifier) l4Lookups(p *flows.Packet, m *shaper.Meta, offs *[maxDims]int32, n int) int {
	hidden := func(d *byteDim) int32 {
		if p.Fragment {
			return d.frag
		}
		return d.unknown
	}
	if d := &c.tcpFlags; d.on {
		switch {
		case p.Proto == flows.ProtoTCP && p.HasL4:
			offs[n] = d.offs[p.TCPFlags]
		case p.Proto == flows.ProtoTCP || p.Proto == flows.ProtoUnknown:
			offs[n] = hidden(d)
		default:
			offs[n] = d.none
		}
		n++
	}
	if d := &c.icmpType; d.on {
		v6 := p.Class == flows.IPv6
		switch {
		case p.Proto == flows.ProtoICMP && !v6 || p.Proto == flows.ProtoICMPv6 && v6:
			if p.HasL4 {
				offs[n] = d.offs[b2i(v6)<<8|int(p.ICMPType)]
			} else {
				offs[n] = hidden(d)
			}
		case p.Proto == flows.ProtoUnknown:
			offs[n] = hidden(d)
		default:
			offs[n] = d.none
		}
		n++
	}
	if c.length.on {
		offs[n] = c.length.lookup(uint32(min(p.Length, math.MaxUint32)), true)
		n++
	}
	if d := &c.dscp; d.on {
		offs[n] = d.offs[p.DSCP&63]
		n++
	}
	if d := &c.ct; d.on {
		if m.CtState == 0 {
			offs[n] = d.unknown
		} else {
			offs[n] = d.offs[m.CtState&31]
		}
		n++
	}
	return n
}

// byteDim makes a table dimension of n values: in(s, v) says whether rule
// s's constraint holds for value v (called only for rules with one).
func (b *builder) byteDim(n int, has func(m *matchSpec) bool, in func(m *matchSpec, v int) bool) byteDim {
	free, unknown, used := b.dim(has)
	if !used {
		return byteDim{}
	}
	d := byteDim{on: true, none: b.intern(free), unknown: b.intern(unknown), frag: b.intern(b.fragDim(has)), offs: make([]int32, n)}
	for v := range n {
		s := b.rulesWhere(func(s *ruleSpec) bool { return has(&s.match) && in(&s.match, v) })
		or(s, free)
		d.offs[v] = b.intern(s)
	}
	return d
}

// buildL4 makes the classifier's dimensions of this file.
func (b *builder) buildL4(c *classifier) {
	c.tcpFlags = b.byteDim(256, func(m *matchSpec) bool { return m.tcpFlags != nil }, func(m *matchSpec, v int) bool {
		return slices.ContainsFunc(m.tcpFlags, func(p flagPair) bool { return uint8(v)&p.mask == p.val })
	})
	c.icmpType = b.byteDim(512, func(m *matchSpec) bool { return m.icmp != nil }, func(m *matchSpec, v int) bool {
		return m.icmp.has(v>>8, v&255)
	})
	c.length = b.idDim(func(m *matchSpec) []idRange { return m.length })
	c.dscp = b.byteDim(64, func(m *matchSpec) bool { return m.hasDSCP }, func(m *matchSpec, v int) bool {
		return m.dscp&(1<<v) != 0
	})
	c.ct = b.byteDim(32, func(m *matchSpec) bool { return m.ct != 0 }, func(m *matchSpec, v int) bool {
		return m.ct&shaper.CtState(v) != 0
	})
}

// CtStateRules names the rules with a ct-state match: live, the queues
// then ask the kernel for each packet's connection state.
func (c *Compiled) CtStateRules() []string {
	var out []string
	for _, r := range c.file.Rules {
		if r.Match != nil && r.Match.CtState != nil {
			out = append(out, r.Name)
		}
	}
	return out
}

// CtStates is the set of states match.ct-state names (0: not given, or
// none parses).
func (m *Match) CtStates() shaper.CtState {
	var s shaper.CtState
	if m == nil {
		return 0
	}
	for _, v := range m.CtState {
		c, _ := parseCtState(v)
		s |= c
	}
	return s
}

// SynOnly reports whether match.tcp-flags is given and every packet it
// matches has SYN set and ACK, RST and FIN clear (iptables' --syn).
func (m *Match) SynOnly() bool {
	if m == nil || len(m.TCPFlags) == 0 {
		return false
	}
	const k = flows.TCPSyn | flows.TCPAck | flows.TCPRst | flows.TCPFin
	for _, v := range m.TCPFlags {
		p, err := parseTCPFlags(v)
		if err != nil || p.mask&k != k || p.val&k != flows.TCPSyn {
			return false
		}
	}
	return true
}

// ICMPTypes are the types match.icmp-type names, ICMP's (IPv4) and
// ICMPv6's, ascending; ok is false when it is not given.
func (m *Match) ICMPTypes() (v4, v6 []uint8, ok bool) {
	if m == nil || m.ICMPType == nil {
		return nil, nil, false
	}
	var s icmpSet
	for _, v := range m.ICMPType {
		parseICMPType(v, &s)
	}
	for t := range 256 {
		if s.has(0, t) {
			v4 = append(v4, uint8(t))
		}
		if s.has(1, t) {
			v6 = append(v6, uint8(t))
		}
	}
	return v4, v6, true
}

// L4Matches names the tcp-flags, icmp-type, length, dscp and ct-state
// fields m gives, as the rule file does, in the schema's order.
func (m *Match) L4Matches() []string {
	if m == nil {
		return nil
	}
	var out []string
	for i := range schema {
		f := &schema[i]
		if f.table != tMatch {
			continue
		}
		if p, ok := f.inMatch(m).(*[]string); ok && *p != nil {
			switch p {
			case &m.TCPFlags, &m.ICMPType, &m.Length, &m.DSCP, &m.CtState:
				out = append(out, f.name)
			}
		}
	}
	return out
}
