package shaper

import "github.com/packetshaper/packetshaper/flows"

// count adds a verdict to the engine's totals.
func (e *Engine) count(v Verdict) {
	if v == Accept {
		e.stats.Accepted++
	} else {
		e.stats.Dropped++
	}
}

// tableStats returns the flows held, evicted and expired by rs's table,
// which is nil for a rule that does not limit.
func (rs *ruleState) tableStats() (n, evictions, expired uint64, ok bool) {
	switch {
	case rs.table != nil:
		return uint64(rs.table.Len()), rs.table.Evictions(), rs.table.Expired(), true
	case rs.gtable != nil:
		return uint64(rs.gtable.Len()), rs.gtable.Evictions(), rs.gtable.Expired(), true
	}
	return 0, 0, 0, false
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	s := *e.stats
	for _, r := range e.rules {
		if n, ev, ex, ok := r.st.tableStats(); ok {
			s.Flows += n
			s.Evictions += ev
			s.Expired += ex
		}
	}
	return s
}

// Retire folds into the counters e shares with old (see Reload) the
// evictions and expirations of old's rules that e does not keep, so that
// the engine-wide counts never go down when a reload changes or removes a
// rule. Call it once, on the deciding goroutine, when e replaces old.
func (e *Engine) Retire(old *Engine) {
	if old == nil || old.stats != e.stats {
		return
	}
	kept := map[*ruleState]bool{}
	for _, r := range e.rules {
		kept[r.st] = true
	}
	for _, r := range old.rules {
		if t := r.st.table; t != nil && !kept[r.st] {
			e.stats.Evictions += t.Evictions()
			e.stats.Expired += t.Expired()
		}
	}
}

// MaxBytes is the most the flow tables can take, full (sliding-window
// logs: limit × 8 bytes per flow more).
func (e *Engine) MaxBytes() uint64 {
	var n uint64
	for _, r := range e.rules {
		switch t := r.st; {
		case t.table != nil:
			n += t.table.MaxBytes()
			if t.lim.algo == SlidingWindow {
				n += uint64(t.table.Max()) * uint64(t.lim.limit) * 8
			}
		case t.gtable != nil:
			n += t.gtable.MaxBytes()
		}
	}
	return n
}

// NumRules is the number of rules.
func (e *Engine) NumRules() int { return len(e.rules) }

// Rule returns rule i as the engine runs it.
func (e *Engine) Rule(i int) Rule { return e.rules[i].Rule }

// RuleStats returns rule i's counters.
func (e *Engine) RuleStats(i int) RuleStats {
	rs := e.rules[i].st
	s := rs.stats
	if n, ev, ex, ok := rs.tableStats(); ok {
		s.Flows, s.Evictions, s.Expired = n, ev, ex
	}
	return s
}

// FlowName formats a flow key made by rule i for people, with the rule's
// prefix lengths ("src 10.1.2.0/24"). Not for the per-packet path.
func (e *Engine) FlowName(i int, k flows.Key) string { return e.rules[i].st.key.Format(k) }

// FlowInfo is one flow as a listing shows it (AppendFlows).
type FlowInfo struct {
	// Rule is the index of the rule whose table holds the flow; Key is
	// the flow's key, made by that rule's Limit.Key (FlowName formats it).
	Rule int
	Key  flows.Key
	FlowStats
	// Last is the time of the flow's newest packet, ns since the Unix
	// epoch.
	Last int64
	// Expired: the flow has been idle for longer than the rule's flow
	// timeout; its next packet starts it afresh, and Left is then a fresh
	// flow's (Limiter.Capacity).
	Expired bool
	// Left is what the flow's limiter would accept now (Limiter.Left), in
	// the rule's cost units: packets, or bytes with Limit.Bytes.
	Left float64
}

// AppendFlows appends to dst the flows held in rule i's table, looking at
// at most max of its entry slots from slot from on (flows.Table.At), and
// returns the slot to go on from, or -1 when none is left. A rule without
// a table (accept, drop) has none. Called again and again between batches
// of packets, from 0 until it returns -1, it lists every flow held all
// along exactly once, and does not stall the packets for long: the time a
// call takes is bounded by max. now (the engine's clock) sets Left and
// Expired. It allocates only when dst must grow. Call it from the
// goroutine that decides packets.
func (e *Engine) AppendFlows(dst []FlowInfo, i, from, max int, now int64) ([]FlowInfo, int) {
	rs := e.rules[i].st
	t := rs.table
	if t == nil {
		return dst, -1
	}
	end := min(from+max, t.Slots())
	timeout := t.Timeout()
	for s := from; s < end; s++ {
		k, last, f, ok := t.At(s)
		if !ok {
			continue
		}
		fi := FlowInfo{Rule: i, Key: *k, FlowStats: f.stats, Last: last}
		if timeout > 0 && now-last > timeout {
			fi.Expired, fi.Left = true, rs.lim.Capacity()
		} else {
			fi.Left = rs.lim.Left(&f.state, now)
		}
		dst = append(dst, fi)
	}
	if end >= t.Slots() {
		return dst, -1
	}
	return dst, end
}

// Flows calls fn for each flow in the rules' tables, rule by rule, until fn
// returns false. Flows that were evicted or expired are not included.
func (e *Engine) Flows(fn func(rule int, k flows.Key, s FlowStats) bool) {
	for i, r := range e.rules {
		stop := false
		switch {
		case r.st.table != nil:
			r.st.table.Range(func(k flows.Key, _ int64, f *flow) bool {
				stop = !fn(i, k, f.stats)
				return !stop
			})
		case r.st.gtable != nil:
			r.st.gtable.Range(func(k flows.Key, _ int64, f *gflow) bool {
				stop = !fn(i, k, f.stats)
				return !stop
			})
		}
		if stop {
			return
		}
	}
}
