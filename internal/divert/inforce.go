package divert

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
)

// Tag starts the comment of every rule rules.sh adds: "packetshaper
// queue=0 proto=udp dport=9000" (then, nft only, "family=both").
const Tag = "packetshaper"

// ParseTag parses a rules.sh comment into the rule it describes; family is
// the family of the tool that listed it (iptables: IPv4, ip6tables: IPv6)
// unless the comment says. ok is false for a comment that is not one of
// rules.sh's.
func ParseTag(comment, family string) (r Rule, ok bool) {
	fs := strings.Fields(comment)
	if len(fs) < 2 || fs[0] != Tag {
		return r, false
	}
	r.Family = family
	for _, f := range fs[1:] {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "queue":
			r.QueueLo, r.QueueHi, err = parseQueue(v)
		case "proto":
			r.Proto = v
		case "dport":
			r.Dport, err = parsePorts(v)
		case "sport":
			r.Sport, err = parsePorts(v)
		case "src":
			r.Src, err = parseSrc(v)
		case "family":
			r.Family = v
		case "syn":
			r.Syn = true
		case "icmptype":
			r.ICMPType, r.HasICMPType, err = parseICMPType(v)
		case "ctstate":
			r.CtState = v
		default:
			continue // a later rules.sh's: not a narrowing we know
		}
		if err != nil {
			return r, false
		}
	}
	if !strings.Contains(comment, "queue=") {
		return r, false
	}
	return r, true
}

func parseQueue(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	x, err := strconv.ParseUint(a, 10, 16)
	if err != nil {
		return 0, 0, err
	}
	y := x
	if isRange {
		if y, err = strconv.ParseUint(b, 10, 16); err != nil {
			return 0, 0, err
		}
	}
	if x > y {
		return 0, 0, fmt.Errorf("bad queue range %q", s)
	}
	return uint16(x), uint16(y), nil
}

func parsePorts(s string) (*policy.PortRange, error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		a, b, isRange = strings.Cut(s, ":")
	}
	x, err := strconv.ParseUint(a, 10, 16)
	if err != nil {
		return nil, err
	}
	y := x
	if isRange {
		if y, err = strconv.ParseUint(b, 10, 16); err != nil {
			return nil, err
		}
	}
	if x > y {
		return nil, fmt.Errorf("bad port range %q", s)
	}
	return &policy.PortRange{Lo: uint16(x), Hi: uint16(y)}, nil
}

// ParseIptables reads the rules rules.sh added from the output of
// iptables -S (family IPv4) or ip6tables -S (IPv6), by their comments.
func ParseIptables(out, family string) []Rule {
	var rs []Rule
	for _, l := range strings.Split(out, "\n") {
		fs := strings.Fields(l)
		if len(fs) < 2 || fs[0] != "-A" {
			continue
		}
		_, c, ok := strings.Cut(l, "--comment ")
		if !ok {
			continue
		}
		if strings.HasPrefix(c, `"`) {
			c, _, _ = strings.Cut(c[1:], `"`)
		} else {
			c, _, _ = strings.Cut(c, " ")
		}
		if r, ok := ParseTag(c, family); ok {
			r.Chain = fs[1]
			rs = append(rs, r)
		}
	}
	return rs
}

// ParseNft reads the rules rules.sh added from the output of nft list
// table inet packetshaper (their comments say the family).
func ParseNft(out string) []Rule {
	var rs []Rule
	chain := ""
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if c, ok := strings.CutPrefix(t, "chain "); ok {
			chain = strings.ToUpper(strings.TrimSuffix(strings.TrimSpace(c), " {"))
			continue
		}
		_, c, ok := strings.Cut(t, `comment "`)
		if !ok || !strings.Contains(t, "queue") {
			continue
		}
		c, _, _ = strings.Cut(c, `"`)
		if r, ok := ParseTag(c, Both); ok {
			r.Chain = chain
			rs = append(rs, r)
		}
	}
	return rs
}

// FromOptions is the rule rules.sh add would install with these options
// (as /etc/default/packetshaper's RULES_OPTS gives them) and --queue
// queue. policyFile is the file of a --policy option ("" if none): its
// rules are then Needed's.
func FromOptions(queue string, opts []string) (r Rule, policyFile string, err error) {
	r.Family, r.Chain = Both, "INPUT" // rules.sh's defaults
	if r.QueueLo, r.QueueHi, err = parseQueue(queue); err != nil {
		return r, "", fmt.Errorf("QUEUE %q: want N or N-M", queue)
	}
	for i := 0; i < len(opts); i++ {
		o := opts[i]
		switch o {
		case "--dry-run", "--offload":
			continue
		case "--syn":
			r.Syn = true
			continue
		}
		if i+1 >= len(opts) {
			return r, "", fmt.Errorf("%s needs a value", o)
		}
		v := opts[i+1]
		i++
		switch o {
		case "--proto":
			r.Proto = strings.ToLower(v)
		case "--dport":
			r.Dport, err = parsePorts(v)
		case "--sport":
			r.Sport, err = parsePorts(v)
		case "--src":
			r.Src, err = parseSrc(v)
			if err == nil && r.Family == Both {
				r.Family = []string{IPv4, IPv6}[b2i(r.Src.Addr().Is6())]
			}
		case "--family":
			if r.Src.IsValid() {
				continue // --src's family decides (rules.sh checks they agree)
			}
			r.Family = v
		case "--chain":
			r.Chain = strings.ToUpper(v)
		case "--icmp-type":
			r.ICMPType, r.HasICMPType, err = parseICMPType(v)
		case "--ctstate":
			r.CtState = strings.ToUpper(v)
		case "--policy":
			policyFile = v
		case "--backend", "--netns", "--queue":
		default:
			return r, "", fmt.Errorf("unknown option %s", o)
		}
		if err != nil {
			return r, "", fmt.Errorf("%s %s: %w", o, v, err)
		}
	}
	return r, policyFile, nil
}

// protoNumbers are rules.sh's protocols by name.
func protoNumber(name string, v6 bool) (uint8, bool) {
	if name == "icmp" && v6 {
		return flows.ProtoICMPv6, true // rules.sh: icmp is icmpv6 for IPv6
	}
	for n, s := range protoNames {
		if s == name {
			return n, true
		}
	}
	return 0, false
}

// Sees reports whether some packet that d diverts can match the rules of
// f's rule r: their family, protocol, ports, source addresses and queues
// have something in common.
func Sees(d *Rule, r *policy.Rule) bool {
	m := r.Match
	fams := families(m)
	for fi, v6 := range []bool{false, true} {
		if !fams[fi] || d.Family == IPv4 && v6 || d.Family == IPv6 && !v6 {
			continue
		}
		if d.Src.IsValid() && d.Src.Addr().Is6() != v6 {
			continue
		}
		if seesFamily(d, m, v6) {
			return true
		}
	}
	return false
}

func seesFamily(d *Rule, m *policy.Match, v6 bool) bool {
	if m == nil {
		return true
	}
	if m.Queue != nil && !slices.ContainsFunc(m.Queue, func(q int) bool { return q >= int(d.QueueLo) && q <= int(d.QueueHi) }) {
		return false
	}
	if d.Src.IsValid() {
		if ps := m.SrcPrefixes(); ps != nil && !slices.ContainsFunc(ps, d.Src.Overlaps) {
			return false
		}
	}
	protos := m.Protocols()
	dports, sports := m.DstPorts(), m.SrcPorts()
	if protos == nil && (dports != nil || sports != nil) {
		protos = portProtos
	}
	if d.Proto != "" {
		p, ok := protoNumber(d.Proto, v6)
		if !ok {
			return true // a protocol we do not know: say nothing
		}
		if protos != nil && !slices.Contains(protos, p) {
			return false
		}
		protos = []uint8{p}
	}
	if protos == nil {
		return true
	}
	for _, p := range protos {
		if p == flows.ProtoICMP && v6 || p == flows.ProtoICMPv6 && !v6 {
			continue
		}
		ported := policy.HasPorts(p)
		if (dports != nil || sports != nil) && !ported {
			continue
		}
		if overlaps(d.Dport, dports) && overlaps(d.Sport, sports) {
			return true
		}
	}
	return false
}

// overlaps reports whether the divert rule's range (nil: any) and the
// match's ranges (nil: any) have a port in common.
func overlaps(d *policy.PortRange, rs []policy.PortRange) bool {
	if d == nil || rs == nil {
		return true
	}
	return slices.ContainsFunc(rs, func(r policy.PortRange) bool { return r.Lo <= d.Hi && d.Lo <= r.Hi })
}

// Warning is a rule that can never see a packet or, Owner, a rule keyed
// or matched by the socket owner (uid, gid) that the divert rules feed only
// from INPUT or FORWARD, where no packet has an owner.
type Warning struct {
	Rule string
	// Matches describes what the rule matches (Owner: its owner key or
	// match); Diverted, what the divert rules send.
	Matches, Diverted string
	Owner             bool
}

func (w Warning) String() string {
	if w.Owner {
		return fmt.Sprintf("rule %q goes by the socket owner (%s), but only %s is diverted, from INPUT or FORWARD, where no packet has an owner: divert the OUTPUT chain (packetshaper-rules add --chain OUTPUT)", w.Rule, w.Matches, w.Diverted)
	}
	return fmt.Sprintf("rule %q can never see a packet: it matches %s, but only %s is diverted", w.Rule, w.Matches, w.Diverted)
}

// ownerUse says how r goes by the packets' owner: "key uid", "match.uid"
// ..., or "" when it does not.
func ownerUse(r *policy.Rule) string {
	var use []string
	if m, err := flows.ParseMode(r.Key); err == nil && (m.By() == flows.ByUID || m.By() == flows.ByGID) && r.Action != "accept" && r.Action != "drop" {
		use = append(use, "key "+r.Key)
	}
	if r.Match != nil && r.Match.UID != nil {
		use = append(use, "match.uid")
	}
	if r.Match != nil && r.Match.GID != nil {
		use = append(use, "match.gid")
	}
	return strings.Join(use, ", ")
}

// Unseen lists the rules of f that none of the divert rules ds can feed;
// not accept rules, whose packets pass anyway.
func Unseen(f *policy.File, ds []Rule) []Warning {
	if len(ds) == 0 {
		return nil
	}
	var what []string
	for i := range ds {
		d := &ds[i]
		q := fmt.Sprint(d.QueueLo)
		if d.QueueHi != d.QueueLo {
			q = fmt.Sprintf("%d-%d", d.QueueLo, d.QueueHi)
		}
		s := d.String() + " to queue " + q
		if !slices.Contains(what, s) {
			what = append(what, s)
		}
	}
	diverted := strings.Join(what, "; ")
	var ws []Warning
	for i := range f.Rules {
		r := &f.Rules[i]
		if r.Action == "accept" {
			continue
		}
		if !slices.ContainsFunc(ds, func(d Rule) bool { return Sees(&d, r) }) {
			ws = append(ws, Warning{Rule: r.Name, Matches: describeMatch(r.Match), Diverted: diverted})
			continue
		}
		// Fed, but only from chains where no packet has an owner ("": a
		// chain not known, not warned about).
		if use := ownerUse(r); use != "" && !slices.ContainsFunc(ds, func(d Rule) bool {
			return Sees(&d, r) && d.Chain != "INPUT" && d.Chain != "FORWARD"
		}) {
			ws = append(ws, Warning{Rule: r.Name, Matches: use, Diverted: diverted, Owner: true})
		}
	}
	return ws
}

// describeMatch sums up a match for a warning: "udp dport 53", "ipv6
// tcp sport 80,443 queue 1".
func describeMatch(m *policy.Match) string {
	if m == nil {
		return "every packet"
	}
	var w []string
	if m.Family != "" {
		w = append(w, m.Family)
	}
	if m.Proto != nil {
		w = append(w, strings.Join(m.Proto, ","))
	}
	if m.Src != nil {
		w = append(w, "from "+strings.Join(m.Src, ","))
	}
	if m.Dst != nil {
		w = append(w, "to "+strings.Join(m.Dst, ","))
	}
	if m.Dport != nil {
		w = append(w, "dport "+strings.Join(m.Dport, ","))
	}
	if m.Sport != nil {
		w = append(w, "sport "+strings.Join(m.Sport, ","))
	}
	if m.Queue != nil {
		q := make([]string, len(m.Queue))
		for i, x := range m.Queue {
			q[i] = fmt.Sprint(x)
		}
		w = append(w, "queue "+strings.Join(q, ","))
	}
	if len(w) == 0 {
		return "every packet (of its interfaces or mark)"
	}
	return strings.Join(w, " ")
}

// parseSrc parses a source: a CIDR, or an address (its host prefix).
func parseSrc(v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		var a netip.Addr
		if a, err = netip.ParseAddr(v); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	return p, err
}

// parseICMPType parses an ICMP type, 0-255; has is whether it parsed.
func parseICMPType(v string) (typ uint8, has bool, err error) {
	n, err := strconv.ParseUint(v, 10, 8)
	if err != nil {
		return 0, false, err
	}
	return uint8(n), true, nil
}
