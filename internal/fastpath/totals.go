//go:build linux

package fastpath

import (
	"fmt"
	"reflect"

	"github.com/packetshaper/packetshaper/shaper"
)

// totalNone is bpf/common.h's TOTAL_NONE: a rule that charges no total.
const totalNone = ^uint32(0)

// fillTotals puts s's totals in the program's totals map: a total of old's
// of the same TotalEntry keeps its state (read from old's map now: what
// old decides until it is detached is not carried over), a new one starts
// with a full bucket as shaper's does. The counters start at zero.
func (p *Program) fillTotals(s Spec, old *Program) error {
	if len(s.Totals) > MaxRules {
		return fmt.Errorf("%d totals, more than the kernel table's %d", len(s.Totals), MaxRules)
	}
	for i := range s.Totals {
		t := &s.Totals[i]
		v := fastpathTotal{Lim: fastpathRuleEntry{
			Burst: uint64(t.BurstN), RateInt: t.RateInt, RateHi: t.RateHi, RateLo: t.RateLo,
			Window: t.Window, Limit: t.Count, Algo: num(algos, t.Algo), Action: num(actions, Limit),
		}}
		if t.Bytes {
			v.Lim.Bytes = 1
		}
		if t.Algo == shaper.TokenBucket {
			v.St.Tokens = t.BurstN // shaper's Reset at 0: a full bucket (for the windows, the word is prev: 0)
		}
		if st, ok := old.totalState(t); ok {
			v.St = st
		}
		if err := p.objs.Totals.Put(uint32(i), &v); err != nil {
			return fmt.Errorf("filling the totals: %w", err)
		}
	}
	return nil
}

// totalState is the state of p's total t, if p has it unchanged.
func (p *Program) totalState(t *TotalEntry) (fastpathFlowState, bool) {
	if p == nil {
		return fastpathFlowState{}, false
	}
	for i := range p.spec.Totals {
		if reflect.DeepEqual(p.spec.Totals[i], *t) {
			var v fastpathTotal
			if err := p.objs.Totals.Lookup(uint32(i), &v); err != nil {
				return fastpathFlowState{}, false
			}
			v.St.Seen &^= uint64(fastpathLockWordLOCK_MASK) // its lock free
			return v.St, true
		}
	}
	return fastpathFlowState{}, false
}

// TotalCounters are a kernel total's counts, as shaper.TotalStats.
type TotalCounters struct {
	Packets, Accepted, Dropped uint64
}

// TotalCounters returns the counters of the total named name, false if no
// kernel rule charges it.
func (p *Program) TotalCounters(name string) (TotalCounters, bool, error) {
	for i, t := range p.spec.Totals {
		if t.Name != name {
			continue
		}
		var v fastpathTotal
		if err := p.objs.Totals.Lookup(uint32(i), &v); err != nil {
			return TotalCounters{}, false, err
		}
		return TotalCounters{v.Packets, v.Accepted, v.Dropped}, true, nil
	}
	return TotalCounters{}, false, nil
}

// TotalNames names the totals the program decides, in its map's order.
func (p *Program) TotalNames() []string {
	names := make([]string, len(p.spec.Totals))
	for i, t := range p.spec.Totals {
		names[i] = t.Name
	}
	return names
}
