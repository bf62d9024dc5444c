package shaper

import (
	"fmt"
	"math"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/hist"
)

type flow struct {
	state State
	stats FlowStats
	// dropRun counts the flow's packets dropped in a row (OffloadAfter).
	dropRun uint32
}

// gflow is a flow of a global rule: its lease beside the local state, which
// only the fallback limiter uses. Local rules' flows stay 8 bytes smaller.
type gflow struct {
	flow
	lease *Lease // nil: the source had no room (Overflow limiter)
	// lim is the local limiter state was last used with: a flow starts
	// afresh (a full bucket of that limiter) when it changes.
	lim *Limiter
}

// ruleState is what a rule accumulates at run time: its flow table and
// counters, with the limiter they go with. It outlives an Engine when
// Reload keeps the rule; only the goroutine deciding packets touches it.
type ruleState struct {
	// The fields a packet reads come first, the limiter by value: one
	// pointer less to chase per packet when rules take turns.
	table  *flows.Table[flow]  // an ActionLimit rule's, unless global
	gtable *flows.Table[gflow] // a global rule's (with a source)
	lim    Limiter
	bytes  bool
	shape  bool // lim shapes: Depart, not Allow
	owned  bool // key has an owner part (flows.Mode.By)
	key    flows.KeyConfig
	stats  RuleStats
	off    OffloadLimit // what the kernel may hold an offloaded flow to
}

// engineRule is one of an Engine's rules: its settings, which belong to
// the Engine and never change, and its state, which Reload may hand on.
type engineRule struct {
	Rule
	st *ruleState
}

// hotRule is what DecidePacket needs of a rule, packed so that with many
// rules taking turns their settings stay in a few cache lines.
type hotRule struct {
	st             *ruleState
	action         Action
	shadow, markEx bool
	mark, mask     uint32
	g              *globalRule // a global rule's source, nil for others
	tot            *totalState // the total the rule charges, nil for none
}

// globalRule is a global rule's source as an engine holds it.
type globalRule struct {
	src   Global
	local *LocalLimit
}

// offloadBuf is how many offload reports wait for TakeOffloads.
const offloadBuf = 64

// Engine decides packets. It is not safe for concurrent use: one goroutine
// at a time calls Decide, Stats, Rules and Flows. Sources that must share
// limits share one Engine and serialize their calls (the daemon's queues
// take turns under a lock, a batch at a time, so that a key has one bucket
// whichever queue its packets arrive on).
type Engine struct {
	rules     []engineRule
	hot       []hotRule // rules[i]'s per-packet settings
	totals    []engineTotal
	cls       Classifier
	malformed Verdict
	offAfter  uint32
	// stats is shared with the engines Reload makes from this one, so
	// that the counters go on; only the deciding goroutine writes it.
	stats *Stats
	// delays histograms the delays of held packets; shared as stats.
	delays *hist.Hist
	// holdRoom is how many more packets the caller can hold
	// (SetHoldRoom).
	holdRoom int

	offloads [offloadBuf]flows.Key
	offLims  [offloadBuf]OffloadLimit
	nOff     int

	// pkt is the packet being decided. It lives here, not on
	// DecidePacket's stack, because the Classifier is an interface: a
	// local passed to it would escape, an allocation per packet. gkey is
	// the key handed to a Global, for the same reason.
	pkt  flows.Packet
	gkey flows.Key
}

// New returns a one-rule engine that limits every packet as c says,
// accepting malformed ones.
func New(c Config) (*Engine, error) {
	return NewPolicy(Policy{Rules: []Rule{{Name: "default", Limit: c}}})
}

// NewPolicy checks p and returns an Engine for it.
func NewPolicy(p Policy) (*Engine, error) {
	return build(p, nil)
}

// Reload returns an engine for p that takes over e's state: a rule whose
// Name, Match, Action and Limit are those of one of e's rules keeps that
// rule's flows, limiter state and counters (its Shadow and marking may
// change); other rules start empty. The engine-wide counters go on. kept
// lists the names of the rules that kept their state. e must not be used
// once the new engine is: they share the kept rules' tables. On error e is
// unchanged.
func (e *Engine) Reload(p Policy) (ne *Engine, kept []string, err error) {
	ne, err = build(p, e)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range ne.rules {
		for _, o := range e.rules {
			if o.st == r.st {
				kept = append(kept, r.Name)
			}
		}
	}
	return ne, kept, nil
}

func build(p Policy, old *Engine) (*Engine, error) {
	if len(p.Rules) == 0 {
		return nil, fmt.Errorf("a policy needs at least one rule")
	}
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("%d rules, more than %d", len(p.Rules), MaxRules)
	}
	if p.Classifier == nil && len(p.Rules) != 1 {
		return nil, fmt.Errorf("%d rules need a classifier", len(p.Rules))
	}
	if p.Malformed > Drop {
		return nil, fmt.Errorf("unknown verdict %d", p.Malformed)
	}
	e := &Engine{cls: p.Classifier, malformed: p.Malformed, offAfter: p.OffloadAfter, stats: &Stats{}, delays: newDelayHist(), holdRoom: math.MaxInt}
	if old != nil {
		// Shared, not copied: old may still be deciding packets on
		// another goroutine until the new engine replaces it.
		e.stats = old.stats
		e.delays = old.delays
	}
	used := map[*ruleState]bool{}
	for i, r := range p.Rules {
		if r.Action > ActionDrop {
			return nil, fmt.Errorf("rule %d (%s): unknown action %d", i, r.Name, r.Action)
		}
		var rs *ruleState
		if old != nil {
			for _, o := range old.rules {
				if !used[o.st] && o.Name == r.Name && o.Match == r.Match && o.Action == r.Action && o.Limit == r.Limit &&
					(o.st.gtable != nil) == isGlobal(r) {
					rs = o.st
					break
				}
			}
		}
		if rs == nil {
			var err error
			if rs, err = newRuleState(r); err != nil {
				if len(p.Rules) == 1 {
					return nil, err
				}
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
		}
		used[rs] = true
		e.rules = append(e.rules, engineRule{Rule: r, st: rs})
		h := hotRule{st: rs, action: r.Action, shadow: r.Shadow, markEx: r.MarkExceeded, mark: r.Mark, mask: r.MarkMask}
		if isGlobal(r) {
			h.g = &globalRule{src: r.Global, local: r.Global.Local()}
		}
		e.hot = append(e.hot, h)
	}
	if err := e.buildTotals(p, old); err != nil {
		return nil, err
	}
	return e, nil
}

// Table is the flow table c gives, its defaults applied: its cap (MaxFlows,
// or flows.DefaultMaxFlows) and idle timeout in nanoseconds (FlowTimeout,
// or DefaultFlowTimeout; negative: never).
func (c *Config) Table() (maxFlows int, timeout int64) {
	maxFlows, timeout = c.MaxFlows, c.FlowTimeout
	if maxFlows == 0 {
		maxFlows = flows.DefaultMaxFlows
	}
	if timeout == 0 {
		timeout = DefaultFlowTimeout
	}
	return maxFlows, timeout
}

// isGlobal reports whether r runs as a global rule: it says so and has a
// source.
func isGlobal(r Rule) bool {
	return r.Action == ActionLimit && r.Limit.Global && r.Global != nil
}

func newRuleState(r Rule) (*ruleState, error) {
	if r.Action != ActionLimit {
		return &ruleState{}, nil
	}
	return newLimitState(r.Limit, isGlobal(r))
}

// newLimitState checks c and makes the state of a rule limited by it, with
// the flow table of a global rule if global.
func newLimitState(c Config, global bool) (*ruleState, error) {
	lim, err := checkLimit(c)
	if err != nil {
		return nil, err
	}
	maxFlows, timeout := c.Table()
	rs := &ruleState{lim: *lim, key: c.Key, owned: c.Key.Mode.By() != 0, bytes: c.Bytes, shape: lim.maxDelay > 0, off: offloadLimit(c.LimiterConfig(), c.Bytes)}
	if global {
		rs.gtable = flows.NewTable[gflow](maxFlows, timeout)
	} else {
		rs.table = flows.NewTable[flow](maxFlows, timeout)
	}
	return rs, nil
}

// checkLimit checks c and returns its limiter; it allocates no flow table.
func checkLimit(c Config) (*Limiter, error) {
	if c.Bytes && c.Algorithm == SlidingWindow {
		return nil, configErr(about(SettingAlgorithm), "sliding-window counts packets; with a bit rate use sliding-window-counter, fixed-window or token-bucket")
	}
	lc := c.LimiterConfig()
	if c.Bytes {
		// A byte budget below one full-size packet drops such packets
		// forever: refuse it rather than shape by surprise.
		switch {
		case lc.Algorithm == TokenBucket && lc.Burst < MinByteBudget:
			return nil, configErr(about(SettingBurst), "a burst of %v bytes is below one full-size packet (%d bytes): larger packets could never pass", lc.Burst, MinByteBudget)
		case lc.Algorithm != TokenBucket && lc.Rate*float64(lc.Window)/1e9 < MinByteBudget:
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "rate × window is %.0f bytes, below one full-size packet (%d bytes): larger packets could never pass; raise the rate or the window", lc.Rate*float64(lc.Window)/1e9, MinByteBudget)
		}
	}
	if c.MaxFlows < 0 {
		return nil, configErr(about(SettingMaxFlows), "max flows must not be negative")
	}
	if c.Shape {
		if c.Algorithm != TokenBucket {
			return nil, configErr(about(SettingShape, SettingAlgorithm), "only the token bucket (leaky bucket) shapes, not %v", c.Algorithm)
		}
		if c.FlowTimeout > 0 && c.FlowTimeout < lc.MaxDelay {
			return nil, configErr(about(SettingFlowTimeout, SettingMaxDelay), "a flow timeout of %v is below the max delay of %v: a flow could be forgotten while its packets are held", time.Duration(c.FlowTimeout), time.Duration(lc.MaxDelay))
		}
	} else if c.MaxDelay != 0 {
		return nil, configErr(about(SettingMaxDelay), "a max delay needs shaping")
	}
	if c.Global {
		if c.Shape {
			return nil, configErr(about(SettingShape, SettingGlobal), "a global limit does not shape: its budget comes in leases, not a departure time per packet; shape locally or police globally")
		}
		if lc.Algorithm != TokenBucket && lc.Algorithm != FixedWindow {
			return nil, configErr(about(SettingAlgorithm, SettingGlobal), "a global limit is a token-bucket or fixed-window one, not %v", lc.Algorithm)
		}
		if s := c.GlobalSlack; !(s >= 0 && s <= 1) {
			return nil, configErr(about(SettingGlobalSlack), "global slack must be between 0 and 1 (a fraction of rate × 1 s), not %v", s)
		}
	} else if c.GlobalSlack != 0 {
		return nil, configErr(about(SettingGlobalSlack, SettingGlobal), "global slack is for global limits only")
	}
	if err := c.Key.Validate(); err != nil {
		at := about(SettingPrefix, SettingKey)
		switch {
		case c.Key.MarkMask != 0 && c.Key.Mode.By() != flows.ByMark:
			at = about(SettingMarkMask, SettingKey)
		case c.Key.Symmetric:
			at = about(SettingSymmetric, SettingPrefix)
		}
		return nil, &ConfigError{Settings: at, Msg: err.Error()}
	}
	lim, err := NewLimiter(lc)
	if err != nil {
		return nil, err
	}
	maxFlows, _ := c.Table()
	if lc.Algorithm == SlidingWindow && float64(maxFlows)*float64(lim.limit)*8 > MaxLogBytes {
		return nil, configErr(about(SettingMaxFlows, SettingAlgorithm), "sliding-window keeps %d timestamps (8 bytes each) for each of up to %d flows: %.1f GiB, over the %d GiB cap; lower max flows or the limit, or use sliding-window-counter",
			lim.limit, maxFlows, float64(maxFlows)*float64(lim.limit)*8/(1<<30), MaxLogBytes>>30)
	}
	return lim, nil
}

// Decide decodes pkt, which starts at the IP header, and returns its verdict
// at time now (nanoseconds since the Unix epoch), for a packet with no
// metadata (the zero Meta). See DecidePacket.
func (e *Engine) Decide(pkt []byte, now int64) Verdict {
	var d Decision
	e.DecidePacket(pkt, nil, now, &d)
	return d.Verdict
}

// noMeta is what a nil *Meta stands for.
var noMeta Meta

// DecidePacket decodes pkt, which starts at the IP header, picks its rule
// from the packet and m (nil: the zero Meta), runs the rule's flow limiter at
// time now (nanoseconds since the Unix epoch) and writes the outcome to d.
// It does not allocate once the flow tables have grown to their working
// size. The decision is written in place rather than returned: a returned
// composite is built in a temporary and copied, which cost more than the
// whole limiter.
func (e *Engine) DecidePacket(pkt []byte, m *Meta, now int64, d *Decision) {
	p := &e.pkt
	wire := 0
	if m != nil {
		wire = m.Len
	}
	p.DecodeLen(pkt, wire)
	e.stats.Packets++
	d.SetMark, d.Exceeded, d.OverTotal, d.Malformed, d.Depart = false, false, false, false, 0
	if p.Class == flows.Malformed {
		e.stats.Malformed++
		d.Verdict, d.Rule, d.Key, d.Malformed = e.malformed, -1, flows.Key{}, true
		e.count(e.malformed)
		return
	}
	if p.NoPorts {
		e.stats.NoPorts++
	}
	ri := 0
	if e.cls != nil {
		if m == nil {
			m = &noMeta
		}
		if ri = e.cls.Classify(p, m); ri < 0 || ri >= len(e.hot) {
			e.stats.Unmatched++
			e.stats.Accepted++
			d.Verdict, d.Rule, d.Key = Accept, -1, flows.Key{}
			return
		}
	}
	d.Rule = ri
	r := &e.hot[ri]
	rs := r.st
	rs.stats.Packets++
	switch r.action {
	case ActionAccept:
		d.Verdict, d.Key = Accept, flows.Key{}
		rs.stats.Accepted++
		e.stats.Accepted++
		return
	case ActionDrop:
		d.Verdict, d.Key = Drop, flows.Key{}
		rs.stats.Dropped++
		e.stats.Dropped++
		return
	}
	rs.key.KeyTo(&d.Key, p)
	if rs.owned && m != nil {
		rs.key.SetOwner(&d.Key, m.Mark, m.UID, m.GID, m.HasOwner)
	}
	if d.Key.NoOwner && rs.key.Ownerless(&d.Key, p) {
		// The rule's no-owner lets it through (the kernel's reply, or
		// no-owner = "accept"): no flow, the rule's accepted.
		d.Verdict, d.Key = Accept, flows.Key{}
		rs.stats.Accepted++
		e.stats.Accepted++
		return
	}
	cost := int64(1)
	if rs.bytes {
		cost = int64(p.Length) // the real length: flows.Packet.DecodeLen
	}
	need := NeedAll
	if m != nil && m.Cost.Set {
		cost, need = m.Cost.Packets, m.Cost.Need
		if rs.bytes {
			cost = m.Cost.Bytes
		}
	}
	var f *flow
	var ok bool
	if r.g == nil {
		var fresh bool
		f, fresh = rs.table.Get(&d.Key, now)
		if fresh {
			rs.lim.Reset(&f.state, now)
			f.stats = FlowStats{}
			f.dropRun = 0
		}
		if rs.shape {
			f.stats.Packets++
			if r.tot != nil {
				e.shapeTotal(r, f, p, m, now, cost, d)
			} else {
				e.shape(rs, f, p, now, cost, d)
			}
			return
		}
		if r.tot != nil {
			ok, d.OverTotal = allowTotal(r.tot, rs, f, p.Length, m, now, cost, need)
		} else if need == NeedAll {
			ok = rs.lim.Allow(&f.state, now, cost)
		} else {
			ok = rs.lim.AllowNeed(&f.state, now, cost, need)
		}
	} else {
		gf, fresh := rs.gtable.Get(&d.Key, now)
		f = &gf.flow
		if fresh {
			rs.lim.Reset(&f.state, now)
			f.stats = FlowStats{}
			f.dropRun = 0
			gf.lim = nil
			e.gkey = d.Key
			gf.lease = r.g.src.Lease(&e.gkey)
		}
		ok = e.allowGlobal(r.g, gf, &d.Key, now, cost, &rs.stats)
	}
	f.stats.Packets++
	if ok {
		f.stats.Accepted++
		f.dropRun = 0
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict = Accept
		return
	}
	// Over the limit.
	f.stats.Dropped++
	d.Exceeded = true
	switch {
	case r.shadow:
		rs.stats.ShadowDropped++
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict = Accept
	case r.markEx:
		rs.stats.Marked++
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict, d.SetMark = Accept, true
		mark := uint32(0)
		if m != nil {
			mark = m.Mark
		}
		d.Mark = mark&^r.mask | r.mark
	default:
		rs.stats.Dropped++
		e.stats.Dropped++
		d.Verdict = Drop
		if e.offAfter > 0 {
			if f.dropRun++; f.dropRun >= e.offAfter {
				f.dropRun = 0
				e.offload(rs, p)
			}
		}
	}
}

// shape decides a packet of flow f of a shaping rule: accepted now, held
// until its departure, or dropped because its rule's queue is full (it
// would wait longer than the max delay) or the caller can hold no more.
func (e *Engine) shape(rs *ruleState, f *flow, p *flows.Packet, now, cost int64, d *Decision) {
	dep, ok := rs.lim.Depart(&f.state, now, cost, e.holdRoom > 0)
	if ok {
		e.accepted(rs, f, now, dep, d)
		return
	}
	e.overflow(rs, f, p, d)
}

// accepted counts a shaped packet of flow f accepted at dep (now or, held,
// later) and writes it to d.
func (e *Engine) accepted(rs *ruleState, f *flow, now, dep int64, d *Decision) {
	f.stats.Accepted++
	f.dropRun = 0
	rs.stats.Accepted++
	e.stats.Accepted++
	d.Verdict = Accept
	if dep > now {
		d.Depart = dep
		e.holdRoom--
		rs.stats.Delayed++
		e.stats.Delayed++
		e.delays.Add(dep - now)
	}
}

// overflow counts a shaped packet of flow f dropped because it would wait
// too long or could not be held, and writes it to d.
func (e *Engine) overflow(rs *ruleState, f *flow, p *flows.Packet, d *Decision) {
	f.stats.Dropped++
	rs.stats.Dropped++
	rs.stats.ShapeOverflow++
	e.stats.Dropped++
	e.stats.ShapeOverflow++
	d.Verdict, d.Exceeded = Drop, true
	if e.offAfter > 0 {
		if f.dropRun++; f.dropRun >= e.offAfter {
			f.dropRun = 0
			e.offload(rs, p)
		}
	}
}

// SetHoldRoom tells the engine how many more packets its caller can hold:
// shaping rules delay at most n more packets (each counts one down), and
// drop as ShapeOverflow, uncharged, a packet they would have delayed beyond
// that. The live path sets it before each batch from the packets its queue
// may still hold. A new engine has no bound.
func (e *Engine) SetHoldRoom(n int) { e.holdRoom = n }

// Delays summarises the delays of the packets shaping rules held so far.
func (e *Engine) Delays() DelayStats { return e.delays.Stats() }

// allow decides a packet of cost at now for flow f of a global rule: from
// its lease, or with the local fallback limiter while the source has set
// one.
func (e *Engine) allowGlobal(g *globalRule, f *gflow, k *flows.Key, now, cost int64, st *RuleStats) bool {
	if lim := g.local.fallback.Load(); lim != nil {
		st.Fallback++
		if f.lease != nil {
			f.lease.Demand(cost)
		}
		if f.lim != lim {
			// A fallback starts spent: its share earns from now on. A
			// full bucket per fallback would let a store that keeps
			// timing out hand every host a fresh burst each time.
			lim.ResetSpent(&f.state, now)
			f.lim = lim
		}
		return lim.Allow(&f.state, now, cost)
	}
	if l := f.lease; l != nil {
		if l.Take(now, cost) {
			return true
		}
		if !l.Retired() {
			return false
		}
		// The source gave the lease up (the key went idle there, or
		// the source was replaced by a reload): take the current one.
		e.gkey = *k
		if f.lease = g.src.Lease(&e.gkey); f.lease != nil {
			return f.lease.Take(now, cost)
		}
	}
	if lim := g.local.overflow.Load(); lim != nil {
		return f.allowLocal(lim, now, cost)
	}
	return false
}

// allowLocal runs f's local state through lim, starting it afresh when it
// was last used with another limiter.
func (f *gflow) allowLocal(lim *Limiter, now, cost int64) bool {
	if f.lim != lim {
		lim.Reset(&f.state, now)
		f.lim = lim
	}
	return lim.Allow(&f.state, now, cost)
}
