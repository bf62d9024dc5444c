package daemon

import (
	"context"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/offload"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// state is the running daemon as the stats log, the metrics and the
// control socket see it: everything here is safe to read from any
// goroutine.
type state struct {
	cfg    *Config
	sh     *shared // the one engine; sh.ws, its queues' workers
	mon    failOpen
	off    *offload.Offloader // nil without --offload
	gl     *globals
	fp     *fastPath // nil without --fastpath
	policy string    // the policy source, described
	start  time.Time

	mu       sync.Mutex
	reloadOK uint64
	reloadNo uint64
	last     *reloadRecord // nil before the first reload
	loaded   time.Time     // when the policy in force was loaded
}

type reloadRecord struct {
	at   time.Time
	ok   bool
	err  string
	kept []string
}

// reloaded records a reload's outcome.
func (d *state) reloaded(r reloadRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.ok {
		d.reloadOK++
		d.loaded = r.at
	} else {
		d.reloadNo++
	}
	d.last = &r
}

func (d *state) reloadCounts() (ok, failed uint64, last *reloadRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reloadOK, d.reloadNo, d.last
}

func (d *state) loadedAt() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loaded
}

// maxQueueLen is the queues' length, as nfq resolves it.
func (d *state) maxQueueLen() uint32 {
	if n := d.cfg.Queue.MaxQueueLen; n > 0 {
		return n
	}
	return nfq.DefaultMaxQueueLen
}

// sample reads one queue's counters now.
func (d *state) sample(w *worker) queueSample {
	s := queueSample{Stats: w.q.Stats(), hold: w.q.HoldStats(), maxLen: d.maxQueueLen(),
		latency: w.q.Latency(), lateHist: cumulative(w.q.LateHistogram(latencyBounds), latencyBounds)}
	if d.cfg.Queue.Latency {
		s.latencyHist = cumulative(w.q.LatencyHistogram(latencyBounds), latencyBounds)
	}
	if ks, err := w.q.KernelStats(); err == nil {
		s.kernel = ks
		select {
		case <-w.stopped: // the last counters read, of a queue now unbound
		default:
			s.bound = ks.PortID == w.q.PortID()
		}
	}
	if d.mon != nil {
		s.failOpen = d.mon.Stats(w.queue)
		// Fail-open accepts also what the kernel could not deliver to
		// a full socket (lost).
		if !w.failClosed {
			s.failOpen.Passed += s.Stats.Lost
		}
	}
	return s
}

// Status is the control socket's status (control.Handler).
func (d *state) Status() control.Status {
	now := time.Now()
	st := control.Status{
		Version: d.cfg.Version, PID: os.Getpid(), Started: d.start, UptimeSecs: now.Sub(d.start).Seconds(),
		Policy: d.policy, Mode: "fail-open", Offload: d.off != nil,
	}
	if d.cfg.Queue.FailClosed {
		st.Mode = "fail-closed"
	}
	st.Fastpath = d.fp.linkStatus()
	ok, failed, last := d.reloadCounts()
	st.Reloads = control.Reloads{OK: ok, Failed: failed}
	if last != nil {
		st.Reloads.Last = &control.Reload{Time: last.at, OK: last.ok, Error: last.err, KeptState: last.kept}
	}
	sn := d.sh.snap.Load()
	for i, w := range d.sh.ws {
		// The engine's counters, once: on its first queue.
		st.Queues = append(st.Queues, d.statusQueue(w, sn, i == 0))
	}
	// The rules and totals of the policy in force, with their counters.
	for j := range sn.rules {
		r := &sn.rules[j]
		cr := describeRule(&r.rule)
		cr.Path = r.pathLabel()
		x := &src{e: sn, r: r}
		for k := range counters {
			if c := &counters[k]; c.ruleField != nil {
				*c.ruleField(&cr) = uint64(c.get(x))
			}
		}
		st.Rules = append(st.Rules, cr)
	}
	for j := range sn.totals {
		st.Totals = append(st.Totals, describeTotal(&sn.totals[j]))
	}
	return st
}

// statusQueue is queue w as status shows it: its counters, and with
// engine, those of the engine sn (which serves every queue).
func (d *state) statusQueue(w *worker, sn *snapshot, engine bool) control.Queue {
	s := d.sample(w)
	q := control.Queue{
		Queue: w.queue, Bound: s.bound, MaxLen: s.maxLen,
		FailOpenSecs: s.failOpen.Secs, FailOpenExact: s.failOpen.Exact, FailOpenActive: s.failOpen.Active,
	}
	x := &src{q: &s, e: sn}
	for i := range counters {
		if c := &counters[i]; c.queueField != nil && (c.from != fromEngine || engine) {
			*c.queueField(&q) = uint64(c.get(x))
		}
	}
	if q.MaxLen > 0 {
		q.Fill = float64(q.Queued) / float64(q.MaxLen)
	}
	return q
}

// describeTotal is total t as status shows it: its settings and counters.
func describeTotal(t *totalSnap) control.Total {
	lc := t.total.Limit.LimiterConfig()
	out := control.Total{Name: t.total.Name, Algorithm: lc.Algorithm.String(), Rate: lc.Rate, Unit: unit(t.total.Limit.Bytes)}
	if lc.Algorithm == shaper.TokenBucket {
		out.Burst = lc.Burst
	} else {
		out.WindowSecs = float64(lc.Window) / 1e9
	}
	x := &src{t: t}
	for k := range counters {
		if c := &counters[k]; c.totalField != nil {
			*c.totalField(&out) = uint64(c.get(x))
		}
	}
	return out
}

// StatusColumn is a counter column of `packetshaper status`'s rule table.
type StatusColumn struct {
	Header string
	Get    func(*control.Rule) uint64
}

// StatusRuleColumns are the counter columns of `packetshaper status`'s
// rule table: the counters with a Column, in their order.
func StatusRuleColumns() []StatusColumn {
	var cs []StatusColumn
	for i := range counters {
		if c := &counters[i]; c.Column != "" && c.ruleField != nil {
			f := c.ruleField
			cs = append(cs, StatusColumn{Header: c.Column, Get: func(r *control.Rule) uint64 { return *f(r) }})
		}
	}
	return cs
}

// describeRule is a rule's settings for status.
func describeRule(r *shaper.Rule) control.Rule {
	out := control.Rule{Name: r.Name, Action: r.Action.String(), Shadow: r.Shadow, MarkExceeded: r.MarkExceeded, Total: r.Total}
	if r.Action != shaper.ActionLimit {
		return out
	}
	c := &r.Limit
	lc := c.LimiterConfig()
	out.Algorithm, out.Rate, out.Unit = lc.Algorithm.String(), lc.Rate, unit(c.Bytes)
	if c.Shape {
		out.Shape, out.MaxDelaySecs = true, float64(c.MaxDelay)/1e9
	}
	if lc.Algorithm == shaper.TokenBucket {
		out.Burst = lc.Burst
	} else {
		out.WindowSecs = float64(lc.Window) / 1e9
	}
	out.Key = policy.DescribeKey(&c.Key)
	maxFlows, timeout := c.Table()
	out.MaxFlows = maxFlows
	if timeout > 0 {
		out.FlowTimeoutSecs = float64(timeout) / 1e9
	}
	return out
}

// Flows lists the flows of the engine, then the fast path's
// (control.Handler).
func (d *state) Flows(ctx context.Context, rule string, emit func(*control.Flow) error) error {
	// An unknown name is known before listing anything.
	if rule != "" && !slices.ContainsFunc(d.sh.snap.Load().rules, func(r ruleSnap) bool { return r.name == rule }) {
		return errNoRule(rule)
	}
	if err := d.sh.listFlows(ctx, rule, emit); err != nil {
		return err
	}
	// Then the kernel's (--fastpath).
	return d.fp.listFlows(ctx, rule, emit)
}
