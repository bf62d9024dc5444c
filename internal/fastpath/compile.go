package fastpath

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// Limits of the kernel's rule table (bpf/fastpath.c's MAX_*).
const (
	MaxRules  = 64
	maxRanges = 4
	maxIfs    = 4
	maxExt    = 32 // IPv6 extension headers walked (bpf/fastpath.c MAX_EXT)
)

// DefaultPuntMark is the skb->mark bit the program sets on packets for user
// space.
const DefaultPuntMark = 0x40000000

// Action of an Entry in the kernel's table.
type Action uint8

const (
	Accept Action = iota
	Drop
	Limit
	// Punt: the rule runs in user space; its packets are marked and passed.
	Punt
)

var actionNames = [...]string{"accept", "drop", "limit", "user space"}

func (a Action) String() string { return actionNames[a] }

// Over is what a kernel limit rule does with a packet over its limit.
type Over uint8

const (
	OverDrop Over = iota
	OverShadow
	OverMark
)

// Entry is one rule as the kernel's table holds it: its match and, for a
// limit rule, its limiter in shaper's integers.
type Entry struct {
	Name   string
	Action Action
	// Orig is the rule's own action: which rules hidden ports match
	// (policy's classifier) depends on it.
	Orig shaper.Action
	// Never: the rule matches no packet (match.iif names no interface).
	Never    bool
	Family   uint8 // 0, 4 or 6
	Src, Dst []netip.Prefix
	// Proto: the protocols matched, a bit each; nil for any.
	Proto      *[4]uint64
	Sport      []PortRange
	Dport      []PortRange
	Iif        []uint32
	HasMark    bool
	Mark, Mask uint32

	// The limiter (Action Limit), as shaper.Limiter holds it.
	Algo                    shaper.Algorithm
	BurstN                  int64
	RateInt, RateHi, RateLo uint64
	Window, Limit           int64
	Bytes                   bool
	Key                     flows.KeyConfig
	MaxFlows                int
	Timeout                 int64
	Over                    Over
	SetMark, SetMask        uint32
}

// PortRange is an inclusive port range.
type PortRange = policy.PortRange

// Spec is a compiled policy for the program.
type Spec struct {
	Entries  []Entry
	PuntMark uint32
}

// Kernel reports whether any rule runs in the kernel.
func (s *Spec) Kernel() bool {
	for _, e := range s.Entries {
		if e.Action != Punt {
			return true
		}
	}
	return false
}

// Reason says where one rule runs and why.
type Reason struct {
	Rule   string
	Kernel bool
	Why    string
}

func (r Reason) String() string {
	where := "user space"
	if r.Kernel {
		where = "kernel"
	}
	return fmt.Sprintf("rule %q: %s: %s", r.Rule, where, r.Why)
}

// Compile splits f between the kernel and user space. It is a pure
// function: it checks f as f.Compile(o) does (an error is that one) and
// touches no kernel.
func Compile(f *policy.File, o policy.Options) (Spec, []Reason, error) {
	c, err := f.Compile(o)
	if err != nil {
		return Spec{}, nil, err
	}
	rules := c.Policy().Rules
	spec := Spec{PuntMark: DefaultPuntMark}
	var reasons []Reason
	if len(rules) > MaxRules {
		for _, r := range rules {
			spec.Entries = append(spec.Entries, Entry{Name: r.Name, Action: Punt})
			reasons = append(reasons, Reason{r.Name, false, fmt.Sprintf("the policy has %d rules, more than the kernel table's %d", len(rules), MaxRules)})
		}
		return spec, reasons, nil
	}
	approx := "" // the first rule whose match the kernel only approximates
	for i, r := range rules {
		e, inexact := entryOf(&f.Rules[i], c)
		e.Name, e.Orig = r.Name, r.Action
		why, kernel := "", true
		switch {
		case inexact != "":
			kernel, why = false, inexact
			if approx == "" {
				approx = r.Name
			}
		case r.Action == shaper.ActionAccept:
			e.Action, why = Accept, "accept"
		case r.Action == shaper.ActionDrop:
			e.Action, why = Drop, "drop"
		case r.Limit.Global:
			kernel, why = false, "a global limit: its budget comes from the shared store"
		case r.Limit.Shape:
			kernel, why = false, "it shapes (holds packets): only user space can hold a packet"
		case r.Limit.Key.Mode > flows.SrcDst:
			kernel, why = false, "its key has an owner part (uid, gid or mark) or no address: the program keys by addresses and ports only"
		case r.Limit.Algorithm == shaper.SlidingWindow:
			kernel, why = false, "the sliding-window log keeps a timestamp per packet: use sliding-window-counter to run it in the kernel"
		case approx != "":
			kernel, why = false, fmt.Sprintf("a limit after rule %q, whose match the kernel cannot evaluate exactly: some of its packets would reach user space and get a second bucket", approx)
		default:
			why = limitEntry(&e, r)
		}
		if !kernel {
			e.Action = Punt
		} else if e.Action == Limit {
			if e.Family != 4 && !allFamily(e.Src, 4) && !allFamily(e.Dst, 4) {
				why += fmt.Sprintf("; IPv6 packets with more than %d extension headers go to user space, where their keys have buckets of their own", maxExt)
			}
			if e.HasMark {
				why += "; match.mark is read at tc ingress, before netfilter's rules set marks"
			}
		}
		spec.Entries = append(spec.Entries, e)
		reasons = append(reasons, Reason{r.Name, kernel, why})
	}
	return spec, reasons, nil
}

func allFamily(ps []netip.Prefix, fam int) bool {
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if (fam == 4) != p.Addr().Is4() {
			return false
		}
	}
	return true
}

// limitEntry fills e's limiter from r's Config, as shaper.NewLimiter does.
func limitEntry(e *Entry, r shaper.Rule) string {
	c := r.Limit
	lc := c.LimiterConfig()
	e.Action, e.Algo, e.Bytes, e.Key = Limit, lc.Algorithm, c.Bytes, c.Key
	e.RateInt, e.RateHi, e.RateLo = exactRate(lc.Rate)
	switch lc.Algorithm {
	case shaper.TokenBucket:
		e.BurstN = int64(lc.Burst * 1e9)
	default:
		e.Window = lc.Window
		e.Limit = int64(math.Floor(lc.Rate*float64(lc.Window)/1e9 + 1e-9))
	}
	e.MaxFlows, e.Timeout = c.Table()
	switch {
	case r.Shadow:
		e.Over = OverShadow
	case r.MarkExceeded:
		e.Over, e.SetMark, e.SetMask = OverMark, r.Mark, r.MarkMask
	}
	return "limit, " + lc.Algorithm.String()
}

var protoNames = map[string]uint8{
	"tcp": flows.ProtoTCP, "udp": flows.ProtoUDP, "icmp": flows.ProtoICMP,
	"icmpv6": flows.ProtoICMPv6, "sctp": flows.ProtoSCTP, "udplite": flows.ProtoUDPLite,
}

// entryOf reads rule d's match table (checked by policy's Compile) into an
// Entry; inexact says why the kernel can only approximate it ("" if it can
// evaluate it exactly).
func entryOf(d *policy.Rule, c *policy.Compiled) (e Entry, inexact string) {
	m := d.Match
	if m == nil {
		return e, ""
	}
	switch m.Family {
	case "ipv4":
		e.Family = 4
	case "ipv6":
		e.Family = 6
	}
	e.Src, e.Dst = prefixes(m.Src), prefixes(m.Dst)
	if m.Proto != nil {
		e.Proto = new([4]uint64)
		for _, s := range m.Proto {
			p, ok := protoNames[s]
			if !ok {
				n, _ := strconv.Atoi(s)
				p = uint8(n)
			}
			e.Proto[p>>6] |= 1 << (p & 63)
		}
	}
	e.Sport, e.Dport = policy.MergePortRanges(m.SrcPorts()), policy.MergePortRanges(m.DstPorts())
	for _, name := range m.Iif {
		if id := c.IfaceID(name); id != 0 {
			e.Iif = append(e.Iif, id)
		}
	}
	if m.Iif != nil && len(e.Iif) == 0 {
		e.Never = true
	}
	if m.Mark != "" {
		vs, ms, hasMask := strings.Cut(m.Mark, "/")
		v, _ := strconv.ParseUint(vs, 0, 32)
		mk := uint64(math.MaxUint32)
		if hasMask {
			mk, _ = strconv.ParseUint(ms, 0, 32)
		}
		e.HasMark, e.Mark, e.Mask = true, uint32(v), uint32(mk)
	}
	switch {
	case m.Oif != nil:
		inexact = "match.oif: the program runs at tc ingress, where the output interface is not known yet"
	case m.Queue != nil:
		inexact = "match.queue: the program runs before any queue"
	case len(e.Sport) > maxRanges || len(e.Dport) > maxRanges:
		inexact = fmt.Sprintf("more than %d port ranges in match.sport or match.dport", maxRanges)
	case len(e.Iif) > maxIfs:
		inexact = fmt.Sprintf("more than %d interfaces in match.iif", maxIfs)
	}
	if len(m.UID) > 0 || len(m.GID) > 0 {
		inexact = "match.uid/gid: the sending socket's owner is not known at tc ingress"
	}
	if inexact != "" {
		// The kernel punts what the rest of the match takes: a
		// superset of the rule's packets.
		e.Sport, e.Dport, e.Iif = nil, nil, nil
		e.Never = false
	}
	return e, inexact
}

func prefixes(items []string) []netip.Prefix {
	if items == nil {
		return nil
	}
	var ps []netip.Prefix
	for _, s := range items {
		if strings.Contains(s, "/") {
			p, _ := netip.ParsePrefix(s)
			ps = append(ps, p.Masked())
			continue
		}
		a, _ := netip.ParseAddr(s)
		ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
	}
	return ps
}

// exactRate is shaper's exactRate (rate in nano-units per nanosecond as
// whole units and a fraction in units of 2⁻¹²⁸). A copy: shaper does not
// export its limiter's integers; TestAgreement checks that they agree.
func exactRate(rate float64) (whole, hi, lo uint64) {
	if !(rate > 0) {
		return 0, 0, 0
	}
	if rate >= 1<<62 {
		return 1 << 62, 0, 0
	}
	b := math.Float64bits(rate)
	m, exp := b&(1<<52-1), int(b>>52&0x7ff)
	if exp == 0 {
		exp = 1
	} else {
		m |= 1 << 52
	}
	e := exp - 1075
	if e >= 0 {
		return m << e, 0, 0
	}
	sh := uint(-e)
	if sh < 64 {
		whole = m >> sh
		m &= 1<<sh - 1
	}
	switch {
	case sh <= 64:
		return whole, m << (64 - sh), 0
	case sh <= 128:
		k := 128 - sh
		return whole, m >> (64 - k), m << k
	default:
		return whole, 0, m >> (sh - 128)
	}
}
