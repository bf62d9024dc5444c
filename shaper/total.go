package shaper

import "fmt"

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
}

// Total is a limit several rules may charge (Rule.Total names it).
type Total struct {
	// Name names the total in Rule.Total, counters and listings.
	Name  string
	Limit TotalConfig
}

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
}

// engineTotal is one of an Engine's totals: its settings and its state.
type engineTotal struct {
	Total
	st *totalState
}

// config is the Config whose limiter the total runs (no flows, no key).
func (c TotalConfig) config() Config {
	return Config{Algorithm: c.Algorithm, Rate: c.Rate, Bytes: c.Bytes, Burst: c.Burst, Window: c.Window}
}

// LimiterConfig returns the limiter parameters c resolves to, defaults
// applied.
func (c TotalConfig) LimiterConfig() LimiterConfig {
	cc := c.config()
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
	return checkLimit(c.config())
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
			ts = &totalState{lim: *lim, bytes: t.Limit.Bytes}
			ts.lim.Reset(&ts.state, 0)
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
	// What a limiter without a log changes: put back as it was, when
	// the flow refuses (a total has no log: checkTotal).
	last, tokens, win, cur, prev := t.state.last, t.state.tokens, t.state.win, t.state.cur, t.state.prev
	if need == NeedAll {
		if !t.lim.Allow(&t.state, now, tc) {
			t.stats.Dropped++
			return false, true
		}
		ok = rs.lim.Allow(&f.state, now, cost)
	} else {
		if !t.lim.AllowNeed(&t.state, now, tc, need) {
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
