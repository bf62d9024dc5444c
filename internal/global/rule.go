package global

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/heap"
	"github.com/packetshaper/packetshaper/shaper"
)

// RuleConfig describes a global rule to NewRule.
type RuleConfig struct {
	// Name names the rule's keys in the store: rules of one name on
	// several hosts share their keys' budgets.
	Name string
	// Limit is the rule's limit, Global set (defaults as shaper applies
	// them).
	Limit shaper.Config
	// MaxKeys caps the keys this host holds leases of for the rule (0:
	// Limit.MaxFlows, or flows.DefaultMaxFlows). A flow whose key finds
	// no room is limited locally, at the rule's rate × this host's share.
	MaxKeys int
}

// Tuning of the leases (see the package documentation).
const (
	// tau is the time constant of a key's demand estimate.
	tau = 0.5 // s
	// decay is the time constant of the grant shares the store keeps.
	decay = 5.0 // s
	// hostsWindow is how long the most hosts seen counts for the
	// fallback's 1/N.
	hostsWindow = int64(60e9)
)

// Rule is one global rule's leases on this host: it implements
// shaper.Global. Its keys are made by the engines (Lease) and kept by the
// client's refresher.
type Rule struct {
	c           *Client
	name        string
	kc          flows.KeyConfig
	lc          shaper.LimiterConfig
	bytes       bool
	fixedWindow bool
	rateLease   bool    // rate leases (rate.go), not token leases
	rate, size  float64 // cost units per second; burst or limit per window
	slack       float64 // cost units all hosts may hold
	mincap      float64 // one packet of any size: 1, or 65535 bytes
	q           *shaper.LeaseQueue
	local       shaper.LocalLimit
	maxKeys     int

	mu     sync.Mutex
	m      map[flows.Key]*entry
	list   []*entry
	fresh  []*entry
	closed bool

	// The refresher's own state.
	due              heap.Heap[dueItem]
	share            float64
	hostsMax         int64
	hostsMaxAt       int64
	fbRate, fbShare  float64
	fbHosts          int64
	retiredSinceComp int

	asks, granted, errs, noLease atomic.Uint64
	burst                        atomic.Uint64 // (rate leases: burst tokens drawn, in granted)
	loss                         rateLoss      // (rate leases, for the fleet simulation)
	keys, hosts                  atomic.Int64
	shareBits, fbRateBits        atomic.Uint64
}

// entry is one key's lease and what the refresher knows of it. Only the
// refresher touches it (but for its making, under Rule.mu).
type entry struct {
	r   *Rule
	l   *shaper.Lease
	k   flows.Key
	key string // in the store

	born, seen   int64   // made; last observed
	lastTokens   int64   // the lease's tokens as last observed or granted
	demandTotal  int64   // taken or wanted since born
	rate         float64 // demand estimate, cost units per second
	lastActive   int64   // last time demand was seen
	low          int64   // the lease's low-water mark
	nextAsk      int64   // no ask before (after a short grant, a failure)
	slot         bool    // nextAsk is a slot the store gave: ask then while active
	dueAt        int64   // in the due heap for this time (0: not)
	cap, hosts   int64   // from the last reply
	own, total   float64 // grant shares from the last reply
	replied      int64
	retired      bool
	inBatch      bool
	probed       bool
	held, charge int64 // of the ask in flight
	want, sentAt int64
	rs           rateState
}

// NewRule makes the leases of a global rule. The rule is kept by the
// client's refresher until Close. A rc it refuses is a *ConfigError (a
// limit that is not global) or the limit's own error (Limit.Check); the
// caller names the rule.
func (c *Client) NewRule(rc RuleConfig) (*Rule, error) {
	if !rc.Limit.Global {
		return nil, &ConfigError{Field: "Limit", Msg: "the rule's limit is not global"}
	}
	if err := rc.Limit.Check(); err != nil {
		return nil, err
	}
	lc := rc.Limit.LimiterConfig()
	r := &Rule{
		c: c, name: rc.Name, kc: rc.Limit.Key, lc: lc, bytes: rc.Limit.Bytes,
		fixedWindow: lc.Algorithm == shaper.FixedWindow,
		rate:        lc.Rate, size: lc.Burst,
		q:       shaper.NewLeaseQueue(4096),
		maxKeys: rc.MaxKeys,
		m:       map[flows.Key]*entry{},
		share:   1,
		due:     heap.New(dueBefore, 0),
	}
	r.rateLease = !c.cfg.TokenLeases && !r.fixedWindow
	if r.fixedWindow {
		lim, err := shaper.NewLimiter(lc)
		if err != nil {
			return nil, err
		}
		r.size = float64(lim.Limit())
	}
	slack := rc.Limit.GlobalSlack
	if slack == 0 {
		slack = shaper.DefaultGlobalSlack
	}
	// What all hosts may hold: an Interval of the rate (a key above its
	// limit then costs about one ask per host and Interval), or more
	// with a larger global-slack.
	// (A fixed window's hosts ask once a window at least: no more than
	// a window's.)
	iv := float64(c.interval) / 1e9
	if lc.Algorithm == shaper.FixedWindow {
		iv = min(iv, float64(lc.Window)/1e9)
	}
	r.slack = max(slack, iv) * lc.Rate
	// A host may always hold one packet of any size: with a bit rate,
	// the largest IP packet (as the local default burst), so that no
	// packet is too large ever to pass.
	r.mincap = 1
	if r.bytes {
		r.mincap = shaper.DefaultBurstBytes
	}
	if r.maxKeys <= 0 {
		r.maxKeys = rc.Limit.MaxFlows
	}
	if r.maxKeys <= 0 {
		r.maxKeys = flows.DefaultMaxFlows
	}
	r.q.SetNotify(c.wake) // a lease queued wakes the refresher
	r.shareBits.Store(math.Float64bits(1))
	r.hosts.Store(1)
	lim, _, _, err := r.localLimiter()
	if err != nil {
		return nil, err
	}
	r.local.SetOverflow(lim)
	c.addRule(r)
	return r, nil
}

// Local returns the rule's local limiters (shaper.Global).
func (r *Rule) Local() *shaper.LocalLimit { return &r.local }

// Lease returns key k's lease, making it if need be (shaper.Global). It
// takes the rule's lock and, for a new key, allocates; nil when the rule
// holds MaxKeys keys or is closed.
func (r *Rule) Lease(k *flows.Key) *shaper.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if e := r.m[*k]; e != nil {
		return e.l
	}
	if len(r.m) >= r.maxKeys {
		r.noLease.Add(1)
		return nil
	}
	now := r.c.clock()
	e := &entry{r: r, k: *k, key: r.storeKey(k),
		born: now, seen: now, lastActive: now}
	e.l = shaper.NewLease(r.q, e)
	r.m[*k] = e
	r.list = append(r.list, e)
	r.fresh = append(r.fresh, e)
	r.c.signal() // its first ask now, not at the next sweep
	return e.l
}

// storeKey is the name of k's hash in the store.
func (r *Rule) storeKey(k *flows.Key) string {
	return r.c.cfg.KeyPrefix + "{" + r.name + "|" + r.kc.Format(*k) + "}"
}

// Close stops keeping the rule's leases and retires them: engines that
// still use the rule limit its flows with the overflow limiter (this host's
// share of the rate) until they are replaced.
func (r *Rule) Close() {
	r.c.removeRule(r)
	r.retireAll()
}

func (r *Rule) retireAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, e := range r.list {
		e.l.Retire()
	}
	r.m, r.list, r.fresh = map[flows.Key]*entry{}, nil, nil
	r.keys.Store(0)
}

// RuleStats is one global rule's state on this host.
type RuleStats struct {
	// Fallback is true while the rule limits locally (the store gone);
	// FallbackRate is then the local limit, in cost units per second.
	Fallback     bool
	FallbackRate float64
	// Keys holds a lease on this host.
	Keys int64
	// Asks counts the asks sent to the store (one command each) and
	// Granted the cost units they were granted; Errors the asks that
	// failed.
	Asks, Granted, Errors uint64
	// NoLease counts flows that found no room for their key (MaxKeys).
	NoLease uint64
	// Share is this host's recent share of the grants of the rule's keys
	// (1 before any grant); Hosts the most hosts that asked for one key.
	Share float64
	Hosts int64
}

// Stats returns the rule's state. Safe for concurrent use.
func (r *Rule) Stats() RuleStats {
	s := RuleStats{
		Keys: r.keys.Load(), Asks: r.asks.Load(), Granted: r.granted.Load(), Errors: r.errs.Load(),
		NoLease: r.noLease.Load(), Share: math.Float64frombits(r.shareBits.Load()), Hosts: r.hosts.Load(),
	}
	if r.local.Fallback() != nil {
		s.Fallback = true
		s.FallbackRate = math.Float64frombits(r.fbRateBits.Load())
	}
	return s
}

// args are the script's arguments for e's ask.
func (r *Rule) args(e *entry) askArgs {
	horizon := r.c.life + r.c.life/4
	a := askArgs{
		fixedWindow: r.fixedWindow, rate: r.rate, size: r.size, windowUs: r.lc.Window / 1000,
		slack: r.slack, mincap: r.mincap, host: r.c.host,
		held: e.held, charge: e.charge, want: e.want,
		horizonUs: horizon / 1000, decayUs: int64(decay * 1e6),
		// The key lives at least horizon + 1 s of the store's clock
		// after the reply's script ran: if it is gone now, it was
		// flushed or lost, and restarts empty.
		known: e.replied != 0 && r.c.clock()-e.replied < horizon,
	}
	if r.rateLease {
		a.rateLease, a.windowUs, a.want = true, r.c.interval/1000, int64(e.rateDemand(r.c.clock())*1000)
		a.have = max(e.l.Tokens(), 0) // (the room for burst tokens: what its new rate lets it hold, less this)
		a.back = e.rs.backSent
	}
	return a
}

// observe reads what the engines did with e's lease since the last look;
// it returns the demand they could not meet from it.
func (r *Rule) observe(e *entry, now int64) (unmet int64) {
	t := e.l.Tokens()
	spent := max(e.lastTokens-t, 0)
	unmet = e.l.TakeDemand()
	x := spent + unmet
	e.lastTokens = t
	if dt := now - e.seen; dt > 0 {
		e.rate *= math.Exp(-float64(dt) / (tau * 1e9))
		e.seen = now
	}
	e.rate += float64(x) / tau
	e.demandTotal += x
	if x > 0 {
		e.lastActive = now
	}
	return unmet
}

// est is e's demand estimate (cost units per second); while e is young,
// at least what it saw since it was made.
func (e *entry) est(now int64) float64 {
	d := e.rate
	if age := now - e.born; age < int64(tau*1e9) {
		d = max(d, float64(e.demandTotal)*1e9/float64(max(age, int64(1e6))))
	}
	return d
}

// target is what e's lease should hold after an ask: half a refresh
// interval of its demand (a host under its share asks about twice an
// interval, and holds little of what others could use), at least one
// packet, at most its cap (a host above its share asks about once an
// interval, at its slot).
func (r *Rule) target(e *entry, now int64) int64 {
	limit := max(r.slack, r.mincap)
	if e.cap > 0 {
		limit = float64(e.cap)
	}
	return int64(min(max(e.est(now)*float64(r.c.interval)/2e9, r.mincap), limit))
}

// consider looks at e and adds it to batch if it should ask now, or puts
// it in the due heap for when it may.
func (r *Rule) consider(e *entry, now int64, batch []*entry) []*entry {
	if e.retired || e.inBatch {
		return batch
	}
	if r.rateLease {
		return r.considerRate(e, now, batch)
	}
	unmet := r.observe(e, now)
	until := e.l.Until()
	fresh := until == math.MaxInt64 // no grant yet
	if !fresh && until <= now {
		if until != 0 {
			e.l.Expire()
			e.lastTokens = e.l.Tokens()
		}
		until = 0
	}
	t := e.l.Tokens()
	active := now-e.lastActive < r.c.life
	// Ask when the lease holds credit to charge, is new, has expired or
	// runs low, or when a packet found it short (with a bit rate a packet
	// may cost more than the low-water mark).
	need := t < 0 || fresh || active && (until == 0 || t < e.low || unmet > 0 || e.slot && now >= e.nextAsk)
	renew := !need && !r.fixedWindow && until != 0 && until-now < r.c.life/4 && active
	if !need && !renew {
		return batch
	}
	if now < e.nextAsk {
		r.schedule(e, e.nextAsk)
		return batch
	}
	e.held, e.charge = max(t, 0), max(-t, 0)
	e.want = max(r.target(e, now)-e.held, 0)
	if e.want == 0 && e.charge == 0 && !renew && !fresh {
		return batch
	}
	e.inBatch = true
	return append(batch, e)
}

// apply takes the store's reply to e's ask, received at now.
func (r *Rule) apply(e *entry, rep reply, now int64) {
	if r.rateLease {
		r.applyRate(e, rep, now)
		return
	}
	e.inBatch = false
	added := e.charge + rep.granted
	until := e.sentAt + r.c.life
	if r.fixedWindow {
		until = e.sentAt + rep.leftUs*1000
	}
	e.l.Grant(added, until)
	e.lastTokens += added
	e.cap, e.hosts, e.own, e.total, e.replied = rep.cap, rep.hosts, rep.own, rep.total, now
	e.low = max(1, int64(e.est(now)*float64(r.c.lead())/1e9))
	e.l.SetLow(e.low)
	e.nextAsk, e.slot = 0, false
	if rep.waitUs > 0 && !r.fixedWindow {
		// Its slot in the key's queue of visits: it asks then if the
		// key is still active, to take the refill kept for it (up to
		// 10 % early: the turns do not keep one order, so that what a
		// writer that empties the bucket at a period takes does not
		// fall on one host's turn every time).
		e.nextAsk, e.slot = now+r.c.jitter(rep.waitUs*1000), true
		r.schedule(e, e.nextAsk)
	} else if rep.waitUs > 0 {
		e.nextAsk = now + rep.waitUs*1000
		if rep.granted < e.want {
			r.schedule(e, e.nextAsk)
		}
	}
	if r.fixedWindow && now-e.lastActive < r.c.life {
		// Ask again as the next window opens (the lease ends with
		// this one).
		r.schedule(e, max(until, e.nextAsk)+r.c.poll)
	}
	r.asks.Add(1)
	r.granted.Add(uint64(rep.granted))
}

// failed takes a failed ask: e asks again after a while.
func (r *Rule) failed(e *entry, now, backoff int64) {
	e.inBatch, e.probed = false, false
	e.rs.backSent = 0 // (kept for the next ask)
	e.nextAsk = now + max(backoff, 5*r.c.poll)
	r.asks.Add(1)
	r.schedule(e, e.nextAsk)
}

func (r *Rule) schedule(e *entry, at int64) {
	if e.dueAt != 0 && e.dueAt <= at {
		return
	}
	e.dueAt = at
	r.due.Push(dueItem{at, e})
}

// collect gathers the entries that should ask now: new keys, leases the
// engines queued, those due, and on a sweep all of them (renewals,
// retirements, the share). In fallback it only observes, and on a probe
// gathers the keys active meanwhile.
func (r *Rule) collect(now int64, sweep, fallback, probe bool, batch []*entry) []*entry {
	r.mu.Lock()
	fresh := r.fresh
	r.fresh = nil
	list := r.list
	r.mu.Unlock()
	if r.q.Overflowed() {
		sweep = true
		for _, e := range list {
			e.l.Unqueue()
		}
	}
	if fallback {
		r.q.Pop(func(*shaper.Lease) {})
		for r.due.Len() > 0 {
			r.due.Pop().e.dueAt = 0
		}
		if sweep || probe {
			for _, e := range list {
				if e.retired {
					continue
				}
				r.observe(e, now)
				if probe && now-e.lastActive < max(2*r.c.probe, r.c.sweep*2) {
					e.held, e.charge, e.nextAsk = 0, 0, 0
					e.want = r.target(e, now)
					e.probed, e.inBatch = true, true
					batch = append(batch, e)
				}
			}
			if sweep {
				r.retireIdle(list, now)
			}
		}
		return batch
	}
	for _, e := range fresh {
		batch = r.consider(e, now, batch)
	}
	r.q.Pop(func(l *shaper.Lease) {
		batch = r.consider(l.Owner.(*entry), now, batch)
	})
	for r.due.Len() > 0 && r.due.Top().at <= now {
		it := r.due.Pop()
		if it.e.dueAt != it.at {
			continue // moved earlier since
		}
		it.e.dueAt = 0
		batch = r.consider(it.e, now, batch)
	}
	if sweep {
		for _, e := range list {
			batch = r.consider(e, now, batch)
		}
		r.retireIdle(list, now)
		r.measure(list, now)
	}
	return batch
}

// retireIdle retires the leases of keys idle for longer than twice a
// lease's life (their flows take a new lease if they come back).
func (r *Rule) retireIdle(list []*entry, now int64) {
	idle := 2 * r.c.life
	var gone []*entry
	for _, e := range list {
		if !e.retired && !e.inBatch && now-e.lastActive > idle && e.l.Tokens() >= 0 {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range gone {
		e.retired = true
		if r.m[e.k] == e {
			delete(r.m, e.k)
		}
	}
	// The key count first, then the leases told: whoever sees a lease
	// retired sees the rule without its key (TestRetireIdle).
	r.keys.Store(int64(len(r.m)))
	for _, e := range gone {
		e.l.Retire()
	}
	r.retiredSinceComp += len(gone)
	if r.retiredSinceComp > len(r.list)/4 {
		live := make([]*entry, 0, len(r.list)-r.retiredSinceComp)
		for _, e := range r.list {
			if !e.retired {
				live = append(live, e)
			}
		}
		r.list, r.retiredSinceComp = live, 0
	}
}

// measure updates the rule's share of the grants and the hosts seen.
func (r *Rule) measure(list []*entry, now int64) {
	var own, total float64
	var hosts int64
	for _, e := range list {
		if e.retired || e.replied == 0 || now-e.replied > int64(2*decay*1e9) {
			continue
		}
		own += e.own
		total += e.total
		hosts = max(hosts, e.hosts)
	}
	if total > 0 {
		r.share = min(own/total, 1)
		r.shareBits.Store(math.Float64bits(r.share))
	}
	if hosts >= r.hostsMax || now-r.hostsMaxAt > hostsWindow {
		if hosts > 0 {
			r.hostsMax, r.hostsMaxAt = hosts, now
		}
	}
	r.hosts.Store(max(r.hostsMax, 1))
	r.mu.Lock()
	r.keys.Store(int64(len(r.m)))
	r.mu.Unlock()
}

// localLimiter is the rule's limiter for this host alone: the rule's rate
// and burst (or limit) × max(its recent share of the grants, 1 / the most
// hosts it saw), at least one packet.
func (r *Rule) localLimiter() (lim *shaper.Limiter, share float64, hosts int64, err error) {
	hosts = max(r.hostsMax, 1)
	share = max(r.share, 1/float64(hosts))
	lc := r.lc
	lc.Rate *= share
	lc.Burst = max(lc.Burst*share, r.mincap)
	if r.fixedWindow {
		// At least one packet per window.
		lc.Rate = max(lc.Rate, r.mincap*1e9/float64(lc.Window))
	}
	lim, err = shaper.NewLimiter(lc)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("global: rule %s: local limit: %w", r.name, err)
	}
	return lim, share, hosts, nil
}

// enterFallback makes the rule limit locally and drops its leases' tokens.
func (r *Rule) enterFallback() {
	lim, share, hosts, err := r.localLimiter()
	if err != nil {
		// Cannot happen for a rule NewRule accepted; keep leasing.
		r.c.log.Error(err.Error())
		return
	}
	r.fbRate, r.fbShare, r.fbHosts = lim.Rate(), share, hosts
	r.fbRateBits.Store(math.Float64bits(r.fbRate))
	r.local.SetOverflow(lim)
	r.local.SetFallback(lim) // before the tokens go: no packet in between finds neither
	r.mu.Lock()
	list := r.list
	r.mu.Unlock()
	for _, e := range list {
		e.l.Expire()
		e.lastTokens = e.l.Tokens()
		e.inBatch, e.nextAsk, e.rs.rr = false, 0, 0
	}
}

// leaveFallback puts the rule back on leases: the keys asked for by the
// probe have theirs, the others start afresh.
func (r *Rule) leaveFallback() {
	r.mu.Lock()
	list := r.list
	r.mu.Unlock()
	for _, e := range list {
		if e.probed {
			e.probed = false
			continue
		}
		e.l.Restart()
		e.lastTokens = e.l.Tokens()
	}
	r.local.SetFallback(nil)
}

type dueItem struct {
	at int64
	e  *entry
}

func dueBefore(a, b *dueItem) bool { return a.at < b.at }
