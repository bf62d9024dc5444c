package replay

import (
	"bytes"
	"cmp"
	"sort"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/heap"
	"github.com/packetshaper/packetshaper/shaper"
)

// Summary counts what a Replayer did. Packets = Accepted + Dropped;
// NonIP records are counted in Packets and Accepted.
type Summary struct {
	Packets, Accepted, Dropped uint64
	// Unmatched: packets no rule matched (accepted). NoPorts: packets
	// whose ports could not be read, keyed by address and protocol.
	Unmatched, NoPorts uint64
	// Malformed: records whose link layer says IP but whose IP packet does
	// not decode (they got the engine's Malformed verdict).
	Malformed uint64
	// NonIP: records that carry no IP packet (ARP, LLDP, …): accepted,
	// never given to the engine.
	NonIP uint64
	// Delayed: packets shaping rules accepted later than their arrival (in
	// Accepted); ShapeOverflow: packets they dropped because their queue
	// was full (in Dropped); Delays: how long the delayed ones waited.
	Delayed, ShapeOverflow uint64
	Delays                 shaper.DelayStats
	// Flows is the number of flows in the engine's table at the end;
	// FlowsSeen the number of flow table insertions (distinct flows, when
	// nothing was evicted or expired). Evictions: flows pushed out of a
	// full table; Expired: flows forgotten after the idle timeout.
	Flows, FlowsSeen, Evictions, Expired uint64
	// NoOwner: packets of rules keyed by uid or gid, which a capture
	// cannot give (pcapng records carry no socket owner): each such rule
	// put them all in its one "no owner" flow, as the live path does with
	// forwarded and incoming packets. (A uid or gid match matches no
	// replayed packet.)
	NoOwner uint64
	// First and Last are the smallest and largest capture timestamps
	// (nanoseconds since the Unix epoch); both 0 when there were no records.
	First, Last int64
}

// Duration is the capture time the replayed records span.
func (s *Summary) Duration() time.Duration { return time.Duration(s.Last - s.First) }

// FlowSummary is one flow's counts, from the flow table, as its rule's
// counters count them: Packets = Accepted + Dropped. The packets over the
// limit of a shadow rule are accepted and counted in ShadowDropped, not in
// Dropped; those of a rule that marks them, in Marked.
type FlowSummary struct {
	Rule                       int // index of the engine's rule whose table holds it
	Key                        flows.Key
	Flow                       string // Engine.FlowName(Key)
	Packets, Accepted, Dropped uint64
	ShadowDropped, Marked      uint64
}

// Summary returns the counts so far.
func (r *Replayer) Summary() Summary {
	st := r.eng.Stats()
	return Summary{
		Packets:       st.Packets + r.nonIP,
		Accepted:      st.Accepted + r.nonIP,
		Dropped:       st.Dropped,
		Delayed:       st.Delayed,
		ShapeOverflow: st.ShapeOverflow,
		Delays:        r.eng.Delays(),
		Malformed:     st.Malformed,
		Unmatched:     st.Unmatched,
		NoPorts:       st.NoPorts,
		NonIP:         r.nonIP,
		NoOwner:       r.noOwner,
		Flows:         st.Flows,
		FlowsSeen:     st.Flows + st.Evictions + st.Expired,
		Evictions:     st.Evictions,
		Expired:       st.Expired,
		First:         r.first,
		Last:          r.last,
	}
}

// RuleSummary is one rule's counts.
type RuleSummary struct {
	Name string
	shaper.RuleStats
}

// Rule returns the engine's rule i, as it runs it.
func (r *Replayer) Rule(i int) shaper.Rule { return r.eng.Rule(i) }

// Rules returns each rule's counts, in the policy's order.
func (r *Replayer) Rules() []RuleSummary {
	return each(r.eng.NumRules(), func(i int) RuleSummary {
		return RuleSummary{Name: r.eng.Rule(i).Name, RuleStats: r.eng.RuleStats(i)}
	})
}

// each is f(0), f(1), … f(n-1).
func each[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// TotalSummary is one total's counts (shaper.TotalStats).
type TotalSummary struct {
	Name string
	shaper.TotalStats
}

// Totals returns each total's counts, in the policy's order.
func (r *Replayer) Totals() []TotalSummary {
	return each(r.eng.NumTotals(), func(i int) TotalSummary {
		return TotalSummary{Name: r.eng.Total(i).Name, TotalStats: r.eng.TotalStats(i)}
	})
}

// flowRec is a flow as the report sorts it: no name yet, so that sorting
// a million flows costs the struct's size each (unsafe.Sizeof: 72 bytes),
// not a formatted string each.
type flowRec struct {
	// dropped: packets dropped; over: packets over the limit that a
	// shadow or marking rule (kind) accepted.
	dropped, over, packets uint64
	rule                   int32
	kind                   overKind
	key                    flows.Key
}

// overKind is what a rule does with the packets over its limit.
type overKind uint8

const (
	overDrops  overKind = iota
	overShadow          // accepts them, counts them as shadow-dropped
	overMarks           // accepts them with a mark
)

// newFlowRec is the flowRec of a flow of rule (the shaper counts every
// packet over the limit as the flow's Dropped, whatever the rule does
// with it).
func (r *Replayer) newFlowRec(rule int, k flows.Key, s shaper.FlowStats) flowRec {
	if r.kinds == nil {
		r.kinds = make([]overKind, r.eng.NumRules())
		for i := range r.kinds {
			switch ru := r.eng.Rule(i); {
			case ru.Shadow:
				r.kinds[i] = overShadow
			case ru.MarkExceeded:
				r.kinds[i] = overMarks
			}
		}
	}
	f := flowRec{dropped: s.Dropped, packets: s.Packets, rule: int32(rule), kind: r.kinds[rule], key: k}
	if f.kind != overDrops {
		f.over, f.dropped = s.Dropped, 0
	}
	return f
}

// before is the report's order: most drops first, then most packets over
// the limit accepted (shadow drops, marks), then most packets, then by
// rule and key bytes: deterministic.
func (a *flowRec) before(b *flowRec) bool {
	if a.dropped != b.dropped {
		return a.dropped > b.dropped
	}
	if a.over != b.over {
		return a.over > b.over
	}
	if a.packets != b.packets {
		return a.packets > b.packets
	}
	if a.rule != b.rule {
		return a.rule < b.rule
	}
	return compareKeys(&a.key, &b.key) < 0
}

// compareKeys orders keys by their fields, a total order.
func compareKeys(a, b *flows.Key) int {
	if c := bytes.Compare(a.Src[:], b.Src[:]); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Dst[:], b.Dst[:]); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort),
		cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Family, b.Family), cmp.Compare(a.Mode, b.Mode),
		cmp.Compare(noOwner(a), noOwner(b)))
}

func noOwner(k *flows.Key) int {
	if k.NoOwner {
		return 1
	}
	return 0
}

func (r *Replayer) summary(f *flowRec) FlowSummary {
	fs := FlowSummary{Rule: int(f.rule), Key: f.key, Flow: r.eng.FlowName(int(f.rule), f.key), Packets: f.packets,
		Accepted: f.packets - f.dropped, Dropped: f.dropped}
	switch f.kind {
	case overShadow:
		fs.ShadowDropped = f.over
	case overMarks:
		fs.Marked = f.over
	}
	return fs
}

// Flows returns the max flows (max > 0) of the engine's tables that come
// first in the report's order: most drops first, then most packets, then by
// rule and key. It keeps only max of them while it looks, so a top-10 of a
// million flows takes no memory to speak of.
func (r *Replayer) Flows(max int) []FlowSummary {
	if max <= 0 {
		var fs []FlowSummary
		r.EachFlow(func(f FlowSummary) { fs = append(fs, f) })
		return fs
	}
	// A heap of the best max so far, worst on top.
	top := heap.New(func(a, b *flowRec) bool { return b.before(a) }, max)
	r.eng.Flows(func(rule int, k flows.Key, s shaper.FlowStats) bool {
		f := r.newFlowRec(rule, k, s)
		switch {
		case top.Len() < max:
			top.Push(f)
		case f.before(top.Top()):
			*top.Top() = f
			top.Fix(0)
		}
		return true
	})
	h := top.Items()
	sort.Slice(h, func(i, j int) bool { return h[i].before(&h[j]) })
	fs := make([]FlowSummary, len(h))
	for i := range h {
		fs[i] = r.summary(&h[i])
	}
	return fs
}

// EachFlow calls fn for every flow in the engine's tables, in the report's
// order (see Flows). It holds 72 bytes per flow (unsafe.Sizeof(flowRec{})) while it runs and names
// one flow at a time, for a report that streams them out.
func (r *Replayer) EachFlow(fn func(FlowSummary)) {
	all := make([]flowRec, 0, r.eng.Stats().Flows)
	r.eng.Flows(func(rule int, k flows.Key, s shaper.FlowStats) bool {
		all = append(all, r.newFlowRec(rule, k, s))
		return true
	})
	sort.Slice(all, func(i, j int) bool { return all[i].before(&all[j]) })
	for i := range all {
		fn(r.summary(&all[i]))
	}
}
