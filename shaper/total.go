package shaper

import (
	"fmt"

	"github.com/packetshaper/packetshaper/flows"
)

// TotalConfig is the limit of a total: one limiter over everything the
// rules that charge it accept together, beside each flow's own limit (a
// class's total, as tc HTB's parent). Zero fields mean what they mean in
// Config: the burst DefaultBurstPackets (with Bytes, the larger of
// DefaultBurstBytes and a tenth of a second at Rate), the window
// DefaultWindow. Only TokenBucket, FixedWindow and SlidingWindowCounter: a
// total's state is one State, charged first and put back when the flow
// refuses (allowTotal), which a sliding-window log's buffer of timestamps
// does not allow. TotalConfig
// is comparable: Reload keeps a total's state when its Name and Limit are
// unchanged.
type TotalConfig struct {
	Algorithm Algorithm
	// Rate is the total's rate per second: packets, or bytes when Bytes.
	Rate  float64
	Bytes bool
	// Burst is the token bucket's capacity; Window the window algorithms'
	// window in nanoseconds.
	Burst  float64
	Window int64
	// Global makes the total one cap for every host that runs it (scope
	// = "global"): its budget is one key's, taken in leases from the
	// source in Total.Global, while each flow's own limit stays local.
	// Only TokenBucket and FixedWindow, and only for policing rules (a
	// lease has no departure time to hold a shaped packet to). A total
	// without a source runs as a local one (replay).
	Global bool
}

// Total is a limit several rules may charge (Rule.Total names it).
type Total struct {
	// Name names the total in Rule.Total, counters and listings.
	Name  string
	Limit TotalConfig
	// Global is the budget source of a total whose Limit.Global is set
	// (its one key: TotalKey); nil runs it as a local total. Reload keeps
	// a total's state only with the same source, so its dynamic type
	// must be comparable (a pointer).
	Global Global
}

// TotalKey is the one flow key a global total asks its source for: no
// address, no owner (Key.String is "").
var TotalKey = flows.Key{Mode: flows.NoAddr}

// TotalStats counts the packets of a total's rules that met it: those its
// limiter allowed and that were charged to it (Accepted: their flow allowed
// them too), and those it refused (Dropped, whatever the rule then did:
// drop, a shadow drop, a mark). Packets − Accepted − Dropped is what the
// flows' own limits refused with the total's room to spare; those cost the
// total nothing.
type TotalStats struct {
	Packets, Accepted, Dropped uint64
}

// totalState is a total as an engine runs it: its limiter, its one state
// and its counters. It outlives an Engine when Reload keeps the total;
// only the goroutine deciding packets touches it.
type totalState struct {
	lim   Limiter
	state State
	bytes bool
	stats TotalStats
	fair  fairState // its shaping rules' fair share (fair.go)
	// A global total's source, lease and the local limiter state was
	// last used with (fallback or overflow); g is nil for a local one.
	g      *globalRule
	lease  *Lease
	key    flows.Key // TotalKey, here so that handing it over allocates nothing
	local  *Limiter
	global bool // Limit.Global, with a source or not
}

// engineTotal is one of an Engine's totals: its settings and its state.
type engineTotal struct {
	Total
	st *totalState
}

// Config is the Config whose limiter the total runs (no flows, no key;
// Global as the total's): what a global total's source is made with.
func (c TotalConfig) Config() Config {
	return Config{Algorithm: c.Algorithm, Rate: c.Rate, Bytes: c.Bytes, Burst: c.Burst, Window: c.Window, Global: c.Global}
}

// LimiterConfig returns the limiter parameters c resolves to, defaults
// applied.
func (c TotalConfig) LimiterConfig() LimiterConfig {
	cc := c.Config()
	return cc.LimiterConfig()
}

// Check reports what is wrong with c, if anything.
func (c TotalConfig) Check() error {
	_, err := checkTotal(c)
	return err
}

func checkTotal(c TotalConfig) (*Limiter, error) {
	if c.Algorithm == SlidingWindow {
		return nil, configErr(about(SettingAlgorithm), "a total is a token-bucket, fixed-window or sliding-window-counter limit, not sliding-window")
	}
	return checkLimit(c.Config())
}

// buildTotals makes e's totals from p's, taking over old's state of a
// total whose Name and Limit are unchanged, and points each limit rule's
// hot settings at its total.
func (e *Engine) buildTotals(p Policy, old *Engine) error {
	byName := make(map[string]*totalState, len(p.Totals))
	for _, t := range p.Totals {
		if t.Name == "" {
			return fmt.Errorf("a total needs a name")
		}
		if byName[t.Name] != nil {
			return fmt.Errorf("total %s: declared twice", t.Name)
		}
		var ts *totalState
		if old != nil {
			for _, o := range old.totals {
				if o.Total == t {
					ts = o.st
				}
			}
		}
		if ts == nil {
			lim, err := checkTotal(t.Limit)
			if err != nil {
				return fmt.Errorf("total %s: %w", t.Name, err)
			}
			ts = &totalState{lim: *lim, bytes: t.Limit.Bytes, global: t.Limit.Global, key: TotalKey}
			ts.lim.Reset(&ts.state, 0)
			if t.Limit.Global && t.Global != nil {
				ts.g = &globalRule{src: t.Global, local: t.Global.Local()}
			}
		}
		byName[t.Name] = ts
		e.totals = append(e.totals, engineTotal{Total: t, st: ts})
	}
	for i, r := range p.Rules {
		if r.Total == "" {
			continue
		}
		ts := byName[r.Total]
		switch {
		case ts == nil:
			return fmt.Errorf("rule %s: no total named %q", r.Name, r.Total)
		case r.Action != ActionLimit:
			return fmt.Errorf("rule %s: a total is for limit rules, not %v ones", r.Name, r.Action)
		case r.Limit.Shape && ts.global:
			return fmt.Errorf("rule %s: a shaping rule cannot charge a global total (its budget comes in leases, not a departure time per packet): make the total local, or police", r.Name)
		case r.Limit.Shape && ts.lim.algo != TokenBucket:
			return fmt.Errorf("rule %s: a shaping rule's total is a token bucket, not %v (it holds packets until the total has room)", r.Name, ts.lim.algo)
		case r.Limit.Shape && ts.lim.rate*float64(e.hot[i].st.lim.maxDelay)/1e9 > MaxBurst:
			return fmt.Errorf("rule %s: the total's rate × the rule's max delay is over %g, a queue too long: lower the max delay", r.Name, float64(MaxBurst))
		case r.Limit.Global:
			return fmt.Errorf("rule %s: a global rule cannot have a total (its leases cannot be handed back when the total refuses)", r.Name)
		}
		e.hot[i].tot = ts
	}
	return nil
}

// allowTotal decides a packet of rule state rs and flow f against both
// its flow's limiter and the total t: the total first, then the flow, and
// the total's state is put back as it was when the flow refuses, so a
// packet either limit refuses costs the other nothing (a refusal moves a
// limiter's refill on, which grants nothing). It reports whether the packet
// passes and, if not, whether the total was what refused it.
func allowTotal(t *totalState, rs *ruleState, f *flow, length int, m *Meta, now, cost int64, need Need) (ok, overTotal bool) {
	if need == NeedOver {
		// A later fragment of a datagram refused at its first: refused
		// by that decision, not by the total now.
		return false, false
	}
	t.stats.Packets++
	tc := totalCost(t, length, m)
	lim := &t.lim
	if t.g != nil {
		var lease bool
		switch lim, lease = t.globalLocal(now, tc); {
		case lease:
			return t.allowLease(rs, f, now, cost, tc, need)
		case lim == nil:
			// Neither a lease nor a local limiter yet (as a global
			// rule's flow without a lease): refused.
			t.stats.Dropped++
			return false, true
		}
	}
	// What a limiter without a log changes: put back as it was, when
	// the flow refuses (a total has no log: checkTotal).
	last, tokens, win, cur, prev := t.state.last, t.state.tokens, t.state.win, t.state.cur, t.state.prev
	if need == NeedAll {
		if !lim.Allow(&t.state, now, tc) {
			t.stats.Dropped++
			return false, true
		}
		ok = rs.lim.Allow(&f.state, now, cost)
	} else {
		if !lim.AllowNeed(&t.state, now, tc, need) {
			t.stats.Dropped++
			return false, true
		}
		ok = rs.lim.AllowNeed(&f.state, now, cost, need)
	}
	if !ok {
		t.state.last, t.state.tokens, t.state.win, t.state.cur, t.state.prev = last, tokens, win, cur, prev
		return false, false
	}
	t.stats.Accepted++
	return true, false
}

// globalLocal returns the local limiter a global total decides with at
// now, or lease when its lease decides: the source's fallback limiter
// while the store is gone (the total's state starts spent, as a global
// rule's flow does: it earns its share's rate from then on; its lease, if
// any, sees the demand, so that the source keeps asking for it), else the
// overflow limiter (nil until the source sets one) when the source has no
// lease for it (it holds as many keys as it may, or was closed by a
// reload).
func (t *totalState) globalLocal(now, tc int64) (lim *Limiter, lease bool) {
	if lim := t.g.local.fallback.Load(); lim != nil {
		if t.lease != nil {
			t.lease.Demand(tc)
		}
		if t.local != lim {
			lim.ResetSpent(&t.state, now)
			t.local = lim
		}
		return lim, false
	}
	if t.lease != nil && !t.lease.Retired() {
		return nil, true
	}
	if t.lease = t.g.src.Lease(&t.key); t.lease != nil {
		return nil, true
	}
	if lim = t.g.local.overflow.Load(); lim != nil && t.local != lim {
		lim.Reset(&t.state, now)
		t.local = lim
	}
	return lim, false
}

// allowLease decides a packet of a global total against its lease (the
// fleet's one budget) and then its flow's local limit. A packet the flow
// refuses hands its tokens back to the lease: the store granted them to
// this host, which may still spend them. (A source that expires the lease
// between the take and the hand-back may see one packet's tokens more at
// its next grant.) The lease decides the whole cost, whatever need says
// but NeedOver, as a global rule's does.
func (t *totalState) allowLease(rs *ruleState, f *flow, now, cost, tc int64, need Need) (ok, overTotal bool) {
	if !t.lease.Take(now, tc) {
		t.stats.Dropped++
		return false, true
	}
	if need == NeedAll {
		ok = rs.lim.Allow(&f.state, now, cost)
	} else {
		ok = rs.lim.AllowNeed(&f.state, now, cost, need)
	}
	if !ok {
		t.lease.tokens.Add(tc)
		return false, false
	}
	t.stats.Accepted++
	return true, false
}

// NumTotals is the number of totals.
func (e *Engine) NumTotals() int { return len(e.totals) }

// Total returns total i as the engine runs it.
func (e *Engine) Total(i int) Total { return e.totals[i].Total }

// TotalStats returns total i's counters.
func (e *Engine) TotalStats(i int) TotalStats { return e.totals[i].st.stats }

// TotalLeft is what total i would accept at now, in its cost units (as
// Limiter.Left): for listings, not for the per-packet path.
func (e *Engine) TotalLeft(i int, now int64) float64 {
	t := e.totals[i].st
	return t.lim.Left(&t.state, now)
}
