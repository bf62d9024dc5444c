package fastpath

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// Limits of the kernel's rule table (bpf/common.h's MAX_*).
const (
	MaxRules  = 64
	maxRanges = 4
	maxIfs    = 4
	maxExt    = 32 // IPv6 extension headers walked before bpf_loop walks the rest (bpf/common.h MAX_EXT)
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

	// The limiter (Action Limit), as shaper.Limiter holds it; Limiter
	// reads the kernel's states (Left, Capacity).
	Limiter                 *shaper.Limiter
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
	// Total names the class total the rule charges (an index of
	// Spec.Totals by name), "" for none.
	Total string
}

// TotalEntry is a class total of kernel rules as the kernel holds it: its
// limiter in shaper's integers (Entry's fields of the same names).
type TotalEntry struct {
	Name                    string
	Limit                   shaper.TotalConfig
	Algo                    shaper.Algorithm
	BurstN                  int64
	RateInt, RateHi, RateLo uint64
	Window, Count           int64
	Bytes                   bool
}

// PortRange is an inclusive port range.
type PortRange = policy.PortRange

// Spec is a compiled policy for the program.
type Spec struct {
	Entries []Entry
	// Totals are the totals the kernel rules charge (each charged by
	// kernel rules only).
	Totals   []TotalEntry
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
		case r.Total != "" && totalOf(c, r.Total).Limit.Global:
			kernel, why = false, fmt.Sprintf("it charges total %q, a global one: its budget comes from the shared store", r.Total)
		case r.Limit.Key.Mode > flows.SrcDst:
			kernel, why = false, "its key has an owner part (uid, gid or mark) or no address: the program keys by addresses and ports only"
		case r.Limit.Algorithm == shaper.SlidingWindow:
			kernel, why = false, "the sliding-window log keeps a timestamp per packet: use sliding-window-counter to run it in the kernel"
		case approx != "":
			kernel, why = false, fmt.Sprintf("a limit after rule %q, whose match the kernel cannot evaluate exactly: some of its packets would reach user space and get a second bucket", approx)
		default:
			if why, err = limitEntry(&e, r); err != nil {
				// f.Compile made this limiter: it cannot fail here.
				return Spec{}, nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
		if !kernel {
			e.Action = Punt
		} else if e.Action == Limit {
			if e.HasMark {
				why += "; match.mark is read at tc ingress, before netfilter's rules set marks"
			}
		}
		spec.Entries = append(spec.Entries, e)
		reasons = append(reasons, Reason{r.Name, kernel, why})
	}
	if err := splitTotals(&spec, reasons, rules, c); err != nil {
		return Spec{}, nil, err
	}
	return spec, reasons, nil
}

// totalOf is c's total named name (policy's Compile checked that there is
// one).
func totalOf(c *policy.Compiled, name string) shaper.Total {
	for _, t := range c.Policy().Totals {
		if t.Name == name {
			return t
		}
	}
	return shaper.Total{Name: name}
}

// splitTotals keeps a total in the kernel when every rule that charges it
// runs there, and sends all of its rules to user space otherwise: a total
// decided apart in the kernel and in user space would pass up to twice its
// rate.
func splitTotals(spec *Spec, reasons []Reason, rules []shaper.Rule, c *policy.Compiled) error {
	for _, t := range c.Policy().Totals {
		user := "" // a rule of t's that runs in user space
		kernel := false
		for i, r := range rules {
			if r.Total != t.Name {
				continue
			}
			if spec.Entries[i].Action == Limit {
				kernel = true
			} else if user == "" {
				user = r.Name
			}
		}
		if !kernel {
			continue
		}
		if user != "" {
			for i, r := range rules {
				if e := &spec.Entries[i]; r.Total == t.Name && e.Action == Limit {
					e.Action, e.Limiter = Punt, nil
					reasons[i] = Reason{r.Name, false, fmt.Sprintf("it charges total %q, which rule %q charges in user space: a total decided apart in the kernel and in user space would pass up to twice its rate", t.Name, user)}
				}
			}
			continue
		}
		lc := t.Limit.LimiterConfig()
		l, err := shaper.NewLimiter(lc)
		if err != nil {
			// f.Compile made this limiter: it cannot fail here.
			return fmt.Errorf("total %q: %w", t.Name, err)
		}
		te := TotalEntry{Name: t.Name, Limit: t.Limit, Algo: lc.Algorithm, Bytes: t.Limit.Bytes}
		te.BurstN, te.RateInt, te.RateHi, te.RateLo = l.Fixed()
		if te.Algo != shaper.TokenBucket {
			te.Window, te.Count = lc.Window, l.Limit()
		}
		spec.Totals = append(spec.Totals, te)
		for i, r := range rules {
			if r.Total == t.Name {
				spec.Entries[i].Total = t.Name
				reasons[i].Why += fmt.Sprintf(", within total %q (all its rules run in the kernel)", t.Name)
			}
		}
	}
	return nil
}

// limitEntry fills e's limiter from r's Config: shaper's own Limiter's
// integers.
func limitEntry(e *Entry, r shaper.Rule) (string, error) {
	c := r.Limit
	lc := c.LimiterConfig()
	l, err := shaper.NewLimiter(lc)
	if err != nil {
		return "", err
	}
	e.Action, e.Limiter, e.Algo, e.Bytes, e.Key = Limit, l, lc.Algorithm, c.Bytes, c.Key
	e.BurstN, e.RateInt, e.RateHi, e.RateLo = l.Fixed()
	if lc.Algorithm != shaper.TokenBucket {
		e.Window, e.Limit = lc.Window, l.Limit()
	}
	e.MaxFlows, e.Timeout = c.Table()
	switch {
	case r.Shadow:
		e.Over = OverShadow
	case r.MarkExceeded:
		e.Over, e.SetMark, e.SetMask = OverMark, r.Mark, r.MarkMask
	}
	return "limit, " + lc.Algorithm.String(), nil
}

// entryOf reads rule d's match table (checked by policy's Compile) into an
// Entry; inexact says why the kernel can only approximate it ("" if it can
// evaluate it exactly).
func entryOf(d *policy.Rule, c *policy.Compiled) (e Entry, inexact string) {
	m := d.Match
	if m == nil {
		return e, ""
	}
	e.Family = m.IPFamily()
	e.Src, e.Dst = m.SrcPrefixes(), m.DstPrefixes()
	if ps := m.Protocols(); ps != nil {
		e.Proto = new([4]uint64)
		for _, p := range ps {
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
	e.Mark, e.Mask, e.HasMark = m.MarkMask()
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
	if l4 := strings.Join(m.L4Matches(), "/"); l4 != "" {
		inexact = l4 + " match: user space for now (the program does not read these fields yet)"
	}
	if inexact != "" {
		// The kernel punts what the rest of the match takes: a
		// superset of the rule's packets.
		e.Sport, e.Dport, e.Iif = nil, nil, nil
		e.Never = false
	}
	return e, inexact
}
