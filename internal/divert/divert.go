// Package divert knows which packets a policy needs diverted to
// packetshaper's queues, and which of its rules the divert rules in force
// keep from ever seeing a packet.
//
// A divert rule here is what scripts/rules.sh (packetshaper-rules) adds:
// a family, a protocol, a destination or source port range (and, for the
// rules in force, a queue or queue range and a source prefix). rules.sh
// stays the one place that writes them into iptables or nftables: Needed
// gives its options (Rule.Args), and `rules.sh add --policy FILE` asks
// `packetshaper divert --policy FILE` for them. InForce reads the rules
// rules.sh installed back from their comments ("packetshaper queue=0
// proto=udp dport=9000"), and Unseen says which policy rules none of them
// can feed.
package divert

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// Families.
const (
	Both = "both"
	IPv4 = "ipv4"
	IPv6 = "ipv6"
)

// Rule is one divert rule.
type Rule struct {
	// Family is Both, IPv4 or IPv6.
	Family string
	// Proto is "" (every protocol) or a name rules.sh takes: tcp, udp,
	// icmp (icmpv6 for IPv6 with Family Both), icmpv6, sctp, udplite,
	// esp, ah, gre.
	Proto string
	// Dport and Sport, if not nil, are the destination or source ports
	// (only with a protocol with ports).
	Dport, Sport *policy.PortRange
	// CtState, if not "", is the connection states diverted, as
	// iptables' --ctstate writes them ("NEW", "NEW,RELATED"): every rule
	// that needs packets matches only those states.
	CtState string
	// Syn: TCP SYNs only (SYN set, ACK, RST and FIN clear: iptables'
	// --syn): every rule that needs TCP packets matches only those.
	Syn bool
	// ICMPType, if HasICMPType, is the one ICMP (or, for icmpv6, ICMPv6)
	// type diverted.
	ICMPType    uint8
	HasICMPType bool

	// The rules in force also have these.
	// QueueLo, QueueHi: the queue or queue range they divert to.
	QueueLo, QueueHi uint16
	// Src, if valid: the source prefix.
	Src netip.Prefix
	// Chain: INPUT, OUTPUT or FORWARD ("" if not known).
	Chain string
}

// Args are r's rules.sh options (without --queue and --chain, which the
// caller gives): "--family both --proto udp --dport 53".
func (r *Rule) Args() []string {
	a := []string{"--family", r.Family}
	if r.Proto != "" {
		a = append(a, "--proto", r.Proto)
	}
	if r.Dport != nil {
		a = append(a, "--dport", fmtPorts(*r.Dport))
	}
	if r.Sport != nil {
		a = append(a, "--sport", fmtPorts(*r.Sport))
	}
	if r.Src.IsValid() {
		a = append(a, "--src", r.Src.String())
	}
	if r.Syn {
		a = append(a, "--syn")
	}
	if r.HasICMPType {
		a = append(a, "--icmp-type", fmt.Sprint(r.ICMPType))
	}
	if r.CtState != "" {
		a = append(a, "--ctstate", r.CtState)
	}
	return a
}

// String describes r in words: "udp dport 9000", "every ipv6 packet".
func (r *Rule) String() string {
	var w []string
	if r.Family != Both && r.Family != "" {
		w = append(w, r.Family)
	}
	if r.Proto != "" {
		w = append(w, r.Proto)
	}
	if r.Src.IsValid() {
		w = append(w, "from "+r.Src.String())
	}
	if r.Dport != nil {
		w = append(w, "dport "+fmtPorts(*r.Dport))
	}
	if r.Sport != nil {
		w = append(w, "sport "+fmtPorts(*r.Sport))
	}
	if r.Syn {
		w = append(w, "syn")
	}
	if r.HasICMPType {
		w = append(w, fmt.Sprintf("type %d", r.ICMPType))
	}
	if r.CtState != "" {
		w = append(w, "ctstate "+r.CtState)
	}
	if r.Proto == "" && r.Dport == nil && r.Sport == nil && !r.Src.IsValid() {
		return strings.Join(append([]string{"every"}, append(w, "packet")...), " ")
	}
	return strings.Join(w, " ")
}

// fmtPorts writes a range as rules.sh takes it: "53", "9000-9100"; port 0
// as the range "0-0" (rules.sh's single port is 1..65535).
func fmtPorts(p policy.PortRange) string {
	if p.Lo == p.Hi && p.Lo != 0 {
		return fmt.Sprint(p.Lo)
	}
	return fmt.Sprintf("%d-%d", p.Lo, p.Hi)
}

// protoNames are the protocols rules.sh names, by number.
var protoNames = map[uint8]string{
	flows.ProtoTCP: "tcp", flows.ProtoUDP: "udp", flows.ProtoICMP: "icmp", flows.ProtoICMPv6: "icmpv6",
	flows.ProtoSCTP: "sctp", flows.ProtoUDPLite: "udplite", 50: "esp", 51: "ah", 47: "gre",
}

// portProtos are the protocols with ports, as rules.sh names them.
var portProtos = []uint8{flows.ProtoTCP, flows.ProtoUDP, flows.ProtoSCTP, flows.ProtoUDPLite}

// MaxPortRanges bounds the port ranges of one family, protocol and
// direction: more (after merging adjacent ones) divert the whole protocol
// instead, one rule rather than a long list.
const MaxPortRanges = 16

// need is one family's divert needs, by protocol number: all (every
// packet of the protocol) or its port ranges. anyProto: every packet.
type need struct {
	anyProto bool
	all      map[uint8]bool
	dports   map[uint8][]policy.PortRange
	sports   map[uint8][]policy.PortRange
	// syn: every rule needing the protocol (TCP) matches SYNs only
	// (false once one does not). types: the ICMP (ICMPv6) types the
	// rules needing the protocol match, unless anyType: one matches
	// every type.
	syn     map[uint8]bool
	types   map[uint8][]uint8
	anyType map[uint8]bool
	// ct: the connection states the rules needing the protocol match
	// (every state once one has no ct-state match: ctAll); famCt,
	// famCtAll the same over every rule of the family (for anyProto).
	ct       map[uint8]shaper.CtState
	ctAll    map[uint8]bool
	famCt    shaper.CtState
	famCtAll bool
}

// MaxICMPTypes bounds the ICMP types of one family diverted one rule
// each: more divert the whole protocol.
const MaxICMPTypes = 8

// Skipped is a rule Needed left out: it can see no packet of the queues.
type Skipped struct {
	Rule string
	Why  string
}

// Needed computes the divert rules the rules of f need when packetshaper
// reads queues (nil: any): the fewest rules.sh rules, by family, protocol
// and port ranges, whose packets include every packet a rule of f matches.
// Addresses, interfaces and marks are left to the rules' matches: a packet
// diverted that no rule matches is accepted. Accept rules need nothing:
// their packets pass whether diverted or not (diverting them would only
// count them; a catch-all accept would divert everything). A rule whose
// match.queue names none of queues is left out, in skipped.
func Needed(f *policy.File, queues []uint16) (rules []Rule, skipped []Skipped) {
	var fam [2]need // IPv4, IPv6
	for i := range fam {
		fam[i] = need{all: map[uint8]bool{}, dports: map[uint8][]policy.PortRange{}, sports: map[uint8][]policy.PortRange{},
			syn: map[uint8]bool{}, types: map[uint8][]uint8{}, anyType: map[uint8]bool{},
			ct: map[uint8]shaper.CtState{}, ctAll: map[uint8]bool{}}
	}
	for i := range f.Rules {
		r := &f.Rules[i]
		if r.Action == "accept" {
			continue
		}
		m := r.Match
		if m != nil && m.Queue != nil && queues != nil && !slices.ContainsFunc(m.Queue, func(q int) bool { return q >= 0 && q <= 0xffff && slices.Contains(queues, uint16(q)) }) {
			skipped = append(skipped, Skipped{r.Name, fmt.Sprintf("its match.queue %v names none of the queues %v", m.Queue, queues)})
			continue
		}
		for fi, ok := range families(m) {
			if ok {
				addNeeds(&fam[fi], m, fi == 1)
			}
		}
	}
	var out [2][]Rule
	for fi := range fam {
		out[fi] = fam[fi].rules([]string{IPv4, IPv6}[fi])
	}
	return join(out[0], out[1]), skipped
}

const allStates = shaper.CtNew | shaper.CtEstablished | shaper.CtRelated | shaper.CtInvalid | shaper.CtUntracked

// ctText writes states as iptables' --ctstate takes them: "NEW,RELATED";
// "" for every state (no narrowing).
func ctText(s shaper.CtState) string {
	if s == allStates {
		return ""
	}
	var out []string
	for i, n := range shaper.CtStates {
		if s&(1<<i) != 0 {
			out = append(out, strings.ToUpper(n))
		}
	}
	return strings.Join(out, ",")
}

// families says which of IPv4 and IPv6 a match can match.
func families(m *policy.Match) [2]bool {
	f := [2]bool{true, true}
	if m == nil {
		return f
	}
	switch m.Family {
	case IPv4:
		f[1] = false
	case IPv6:
		f[0] = false
	}
	for _, ps := range [][]netip.Prefix{m.SrcPrefixes(), m.DstPrefixes()} {
		if ps == nil {
			continue
		}
		var has [2]bool
		for _, p := range ps {
			has[b2i(p.Addr().Is6())] = true
		}
		f[0], f[1] = f[0] && has[0], f[1] && has[1]
	}
	return f
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func addNeeds(n *need, m *policy.Match, v6 bool) {
	states := m.CtStates()
	n.famCt |= states
	n.famCtAll = n.famCtAll || states == 0
	protos := m.Protocols()
	dports, sports := m.DstPorts(), m.SrcPorts()
	// tcp-flags matches TCP only, icmp-type ICMP and ICMPv6 only.
	var only []uint8
	switch {
	case m != nil && m.TCPFlags != nil:
		only = []uint8{flows.ProtoTCP}
	case m != nil && m.ICMPType != nil:
		only = []uint8{flows.ProtoICMP, flows.ProtoICMPv6}
	}
	if only != nil {
		if protos == nil {
			protos = only
		} else {
			protos = slices.DeleteFunc(slices.Clone(protos), func(p uint8) bool { return !slices.Contains(only, p) })
		}
	}
	if protos == nil {
		if dports == nil && sports == nil {
			n.anyProto = true
			return
		}
		protos = portProtos
	}
	v4types, v6types, typed := m.ICMPTypes()
	types := v4types
	if v6 {
		types = v6types
	}
	for _, p := range protos {
		switch p {
		case flows.ProtoTCP:
			syn, seen := n.syn[p]
			n.syn[p] = m.SynOnly() && (syn || !seen)
		case flows.ProtoICMP, flows.ProtoICMPv6:
			switch {
			case !typed:
				n.anyType[p] = true
			case len(types) == 0:
				// Only the other family's types: none of this
				// family's packets.
				protos = slices.DeleteFunc(slices.Clone(protos), func(q uint8) bool { return q == p })
			default:
				n.types[p] = append(n.types[p], types...)
			}
		}
	}
	for _, p := range protos {
		// ICMP is IPv4's, ICMPv6 IPv6's: neither matches the other
		// family's packets.
		if p == flows.ProtoICMP && v6 || p == flows.ProtoICMPv6 && !v6 {
			continue
		}
		if _, named := protoNames[p]; !named {
			n.anyProto = true // rules.sh cannot name it: every packet
			continue
		}
		n.ct[p] |= states
		n.ctAll[p] = n.ctAll[p] || states == 0
		switch {
		case dports == nil && sports == nil:
			n.all[p] = true
		case !policy.HasPorts(p):
			// Ports match only the protocols with ports: never.
		case dports != nil:
			// Both given: the destination ports are enough (fewer
			// packets is not the point: one list, not a product).
			n.dports[p] = append(n.dports[p], dports...)
		default:
			n.sports[p] = append(n.sports[p], sports...)
		}
	}
}

// rules are one family's rules, ordered by protocol, then ports.
func (n *need) rules(family string) []Rule {
	if n.anyProto {
		r := Rule{Family: family}
		if !n.famCtAll {
			r.CtState = ctText(n.famCt)
		}
		return []Rule{r}
	}
	var out []Rule
	protos := map[uint8]bool{}
	for _, m := range []map[uint8][]policy.PortRange{n.dports, n.sports} {
		for p := range m {
			protos[p] = true
		}
	}
	for p := range n.all {
		protos[p] = true
	}
	for _, p := range slices.Sorted(mapsKeys(protos)) {
		name := protoNames[p]
		syn := n.syn[p]
		ct := ""
		if !n.ctAll[p] {
			ct = ctText(n.ct[p])
		}
		d, s := policy.MergePortRanges(n.dports[p]), policy.MergePortRanges(n.sports[p])
		if types := slices.Compact(slices.Sorted(slices.Values(n.types[p]))); n.all[p] && !n.anyType[p] && len(types) > 0 && len(types) <= MaxICMPTypes {
			for _, t := range types {
				out = append(out, Rule{Family: family, Proto: name, ICMPType: t, HasICMPType: true, CtState: ct})
			}
			continue
		}
		if n.all[p] || len(d) > MaxPortRanges || len(s) > MaxPortRanges {
			out = append(out, Rule{Family: family, Proto: name, Syn: syn, CtState: ct})
			continue
		}
		for i := range d {
			out = append(out, Rule{Family: family, Proto: name, Dport: &d[i], Syn: syn, CtState: ct})
		}
		for i := range s {
			out = append(out, Rule{Family: family, Proto: name, Sport: &s[i], Syn: syn, CtState: ct})
		}
	}
	return out
}

func mapsKeys(m map[uint8]bool) func(func(uint8) bool) {
	return func(yield func(uint8) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// join makes one Both rule of an IPv4 and an IPv6 rule that are the same
// but for the family (ICMP and ICMPv6 are rules.sh's "icmp" with Both).
func join(v4, v6 []Rule) []Rule {
	same := func(a, b Rule) bool {
		if a.Proto != b.Proto && !(a.Proto == "icmp" && b.Proto == "icmpv6") {
			return false
		}
		return eqPorts(a.Dport, b.Dport) && eqPorts(a.Sport, b.Sport) && a.Syn == b.Syn &&
			a.HasICMPType == b.HasICMPType && a.ICMPType == b.ICMPType && a.CtState == b.CtState
	}
	var out []Rule
	used := make([]bool, len(v6))
	for _, a := range v4 {
		j := slices.IndexFunc(v6, func(b Rule) bool { return same(a, b) })
		if j >= 0 && !used[j] {
			used[j] = true
			a.Family = Both
		}
		out = append(out, a)
	}
	for j, b := range v6 {
		if !used[j] {
			out = append(out, b)
		}
	}
	return out
}

func eqPorts(a, b *policy.PortRange) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// CtWarning says, when rules of f match ct-state but a divert rule that
// can feed them (of rules, from Needed) queues every state (another rule
// needs it), what those rules get where the kernel sends no connection
// states to NFQUEUE; "" otherwise.
func CtWarning(f *policy.File, rules []Rule) string {
	var ct []string
	for i := range f.Rules {
		r := &f.Rules[i]
		if r.Match == nil || r.Match.CtState == nil || r.Action == "accept" {
			continue
		}
		if slices.ContainsFunc(rules, func(d Rule) bool { return d.CtState == "" && Sees(&d, r) }) {
			ct = append(ct, fmt.Sprintf("%q", r.Name))
		}
	}
	if len(ct) == 0 {
		return ""
	}
	return fmt.Sprintf("rule(s) %s match ct-state, but other rules need packets of every state diverted with theirs, so the divert rules cannot queue only those states: on a kernel that does not send connection states to NFQUEUE (built without CONFIG_NETFILTER_NETLINK_GLUE_CT) every queued packet's state is unknown, and these rules take every packet their other fields match", strings.Join(ct, ", "))
}
