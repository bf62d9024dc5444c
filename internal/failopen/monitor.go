package failopen

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
)

// Fail-open accounting.
//
// With fail-open (the default), a packet that finds its queue full is
// accepted by the kernel at once: no verdict, no shaping, and no counter
// anywhere: queue_dropped counts only fail-closed drops, and such a packet
// gets no id (nfnetlink_queue.c, __nfqnl_enqueue_packet). What the kernel
// does count:
//
//   - id_sequence (the last field of /proc/net/netfilter/nfnetlink_queue):
//     every packet that got into the queue, plus those it then failed to
//     send to the socket (those leave a gap in the ids: nfq.Stats.Lost);
//   - the counter of the rule that queued the packet, which counts every
//     packet that reached its queue statement.
//
// So while a process serves the queue, rule packets − id_sequence growth =
// packets passed by fail-open, exactly; summed over every rule that sends
// to the queue and, for a rule that balances over several queues, over all
// of them (which must all be ours: a queue nobody serves lets the rule's
// packets bypass it without an id too). The Monitor reads that where it
// can (nf_tables rules with counters: every iptables-nft rule, and nft
// rules with "counter" before "queue"), and otherwise estimates it from
// samples of the queue: the arrival rate (id_sequence growth while the
// queue is not full) times the time the queue was full, minus what got in.

// Defaults for the zero fields of MonitorConfig.
const (
	// DefaultMonitorPeriod is how often the Monitor samples the kernel's
	// queue table (queue_total, id_sequence).
	DefaultMonitorPeriod = 100 * time.Millisecond
	// DefaultRulePeriod is how often it reads the rule counters.
	DefaultRulePeriod = time.Second
)

const (
	// stallFactor: a gap between two samples longer than this many
	// periods means the monitor did not run, most likely because the
	// whole process did not (SIGSTOP, a long GC or scheduling pause).
	stallFactor = 3
	// rateWindow is how many of the last intervals in which the queue was
	// not full make the arrival rate: about half a second. Short, because
	// overload often follows a surge; an average over intervals (not a
	// moving average) so that the quiet before traffic started weighs only
	// as long as it lasted.
	rateWindow = 5
	// minSettleGap is the least time between two rule readings when the
	// end of a fail-open episode asks for one.
	minSettleGap = int64(200 * time.Millisecond)
	// fullScanEvery: every this many rule readings, every chain is dumped
	// (to find new queue rules), not only those known to hold one.
	fullScanEvery = 10
	// failOpenLogEvery is the least time between two log lines of a queue.
	failOpenLogEvery = int64(time.Second)
)

// MonitorConfig configures a Monitor. The zero value samples every
// DefaultMonitorPeriod, reads rule counters every DefaultRulePeriod and
// logs nothing.
type MonitorConfig struct {
	// Period is the time between two samples of the kernel's queue table;
	// 0 means DefaultMonitorPeriod. It is the resolution of
	// FailOpenStats.Secs and of the stall detection.
	Period time.Duration
	// RulePeriod is the time between two readings of the rule counters;
	// 0 means DefaultRulePeriod.
	RulePeriod time.Duration
	// EstimateOnly makes the Monitor never read rule counters: every count
	// is estimated (for tests of the estimate, or where dumping the
	// queueing chains every RulePeriod is unwanted).
	EstimateOnly bool
	// Logger, if not nil, gets a warning when a queue fills up (fail-open
	// starts) and when it is no longer full (with the time, the packets
	// passed, and whether that count is exact; attributes failopen_secs,
	// failopen_passed, failopen_exact), at most one line per queue per
	// second; and an info line per queue saying how its fail-open passes
	// are counted (exact, from which rules, or estimated, and why), at
	// start and when that changes. A stall of the process itself is seen
	// only once it is over: the end line says how long it lasted.
	Logger *slog.Logger
}

func (c MonitorConfig) withDefaults() MonitorConfig {
	if c.Period <= 0 {
		c.Period = DefaultMonitorPeriod
	}
	if c.RulePeriod <= 0 {
		c.RulePeriod = DefaultRulePeriod
	}
	return c
}

// FailOpenStats count the packets of a queue that passed without a verdict
// because the queue was full (fail-open). The zero value means none.
type FailOpenStats struct {
	// Secs is how long the queue was full, in seconds: the time between
	// samples that found it full (resolution MonitorConfig.Period); across
	// a stall of the process itself, the time the queue was full after
	// filling at the arrival rate; between samples that missed a short
	// fill, the time the exact count took at the average arrival rate.
	Secs float64
	// Passed is the number of packets the kernel accepted without a
	// verdict because the queue was full. It only grows, at each reading
	// of the rule counters (every RulePeriod, soon after a queue drains,
	// and at stop): up to RulePeriod behind. Always 0 for a fail-closed
	// queue (its drops are the kernel's queue_dropped).
	//
	// An estimate is the arrival rate of the last half second in which the
	// queue was not full, times the time it was full, minus what got in:
	// within a few percent for a steady rate (TestMonitorFailOpen's and
	// TestMonitorBalance's estimating monitors log it beside the truth
	// and fail beyond 10 %:
	// within 2% on a quiet 2-core VM, up to 7% on a loaded one), low
	// after a surge, and near 0 for a burst out of silence.
	Passed uint64
	// Exact reports that Passed comes from rule counters: exact for the
	// queue, or, for a rule balancing over several queues, exact for the
	// sum over those queues (the split between them follows their
	// estimates). False when some packets were estimated: the queue has no
	// readable rule counter, a rule sends to it and to queues this Monitor
	// does not serve, the rules changed while the queue was full, or the
	// counters counted fewer packets than the queue received while it may
	// have filled. Counters that count fewer packets than the queue
	// received while it could not fill (GSO packets queued as segments:
	// one rule hit, several ids) keep it true: nothing can have passed
	// then; from then on an interval in which the queue may have filled
	// is estimated, in segments.
	Exact bool
	// Active reports that the queue was full at the last sample.
	Active bool
}

// queueInfo is what the core needs to know about a queue.
type queueInfo struct {
	num    uint16
	portID uint32 // our socket's netlink port: a /proc line with another is not ours
	maxLen uint32
	// failClosed: a full queue drops packets (counted by the kernel as
	// queue_dropped) instead of passing them: nothing passes, Passed stays
	// 0, and Secs still says how long the queue was full.
	failClosed bool
}

// core is the Monitor's state and arithmetic, without I/O: samples, rule
// readings and time are arguments (ns on a monotonic clock). Not safe for
// concurrent use.
type core struct {
	period, rulePeriod int64
	estimateOnly       bool
	log                *slog.Logger

	qs        []*qmon // ascending queue numbers
	groups    []*group
	prevRules map[ruleKey]uint64 // counters at the last settle
	settled   bool               // settle has run once (the baseline)
	lastSet   int64              // time of the last settle
	wantSet   bool               // an episode ended: settle soon
	unionSecs float64            // time at least one queue was full
	finished  bool
	firstSet  int64 // time of the first settle
	idleSaid  bool  // the warning that no rule feeds an empty queue was logged
}

// qmon is one queue's state.
type qmon struct {
	queueInfo

	// last sample
	have   bool // t, total and id hold a sample
	t      int64
	total  uint64
	id     uint32
	drops  uint64 // queue_dropped
	broken bool   // unbound (or another socket's) at some sample since the last settle

	rate  float64              // arrival rate, packets/s, over win
	win   [rateWindow]interval // the last intervals in which the queue was not full
	winAt int                  // next slot of win

	// since the last settle
	// mayFull: some interval between two samples could have filled the
	// queue (seen full at either end, or it took in at least the room it
	// had, or a stall); otherwise no packet can have passed it.
	mayFull   bool
	est       float64 // estimated packets passed
	secsSince float64 // time full
	idSince   uint64  // ids consumed

	secs      float64
	exact     uint64  // packets counted from rule counters
	estimated float64 // packets estimated
	tainted   bool    // some interval in which it was full was estimated
	active    bool
	group     *group

	// logging
	lastLog     int64
	pendingEnd  bool    // an episode ended (or a stall passed packets) and is not reported yet
	startLogged bool    // the start of an episode not reported yet was logged
	episodes    int     // episodes since the last report
	stall       float64 // seconds of own-process stall that passed packets, since the last report
	repSecs     float64 // secs at the last report
	repPassed   uint64  // passed at the last report
	repEst      bool    // an interval since the last report was estimated
}

// interval is the ids a queue consumed in ns nanoseconds.
type interval struct {
	ids uint64
	ns  int64
}

func (q *qmon) passed() uint64 { return q.exact + uint64(q.estimated+0.5) }

func (q *qmon) stats() FailOpenStats {
	return FailOpenStats{
		Secs:   q.secs,
		Passed: q.passed(),
		Exact:  q.group != nil && q.group.exactOK && !q.tainted,
		Active: q.active,
	}
}

// group is a set of our queues linked by the rules that send to them: the
// unit in which fail-open passes can be counted exactly.
type group struct {
	queues  []*qmon
	rules   []ruleKey
	sig     string // queues and rules: the same sig is the same group
	exactOK bool   // every rule has a counter and covers only our queues
	why     string // if !exactOK: why not

	base  bool     // ids and drops hold a baseline: every queue bound at the last settle
	ids   []uint32 // id_sequence of each queue at the last settle
	drops []uint64 // queue_dropped of each queue at the last settle
	carry int64    // a small negative difference, carried to the next interval
	// mismatch: the counters counted fewer packets than the queues
	// received; from then on the group is estimated (sticky: the cause,
	// GSO packets queued as segments or rules the Monitor cannot see,
	// does not go away).
	mismatch bool
	// segmented: the counters counted fewer packets than the queues
	// received over an interval in which no queue could have filled: the
	// kernel queues a GSO packet (one rule hit) as its segments (one id
	// each), or rules this monitor cannot see feed the queue. The
	// counters and the ids then count different things; what passed is 0
	// (exactly) in an interval where no queue may have filled, and the
	// estimate, in segments as the queue counts, in one where one may
	// have (sticky, as mismatch).
	segmented bool
}

func newCore(qs []queueInfo, c MonitorConfig) *core {
	c = c.withDefaults()
	m := &core{
		period:       int64(c.Period),
		rulePeriod:   int64(c.RulePeriod),
		estimateOnly: c.EstimateOnly,
		log:          c.Logger,
		prevRules:    map[ruleKey]uint64{},
	}
	for _, q := range qs {
		m.qs = append(m.qs, &qmon{queueInfo: q, lastLog: math.MinInt64 / 2})
	}
	slices.SortFunc(m.qs, func(a, b *qmon) int { return int(a.num) - int(b.num) })
	return m
}

func (c *core) queue(n uint16) *qmon {
	for _, q := range c.qs {
		if q.num == n {
			return q
		}
	}
	return nil
}

// dueSettle reports whether the next sample at now should come with a rule
// reading and a settle.
func (c *core) dueSettle(now int64) bool {
	d := now - c.lastSet
	return !c.settled || d >= c.rulePeriod || (c.wantSet && d >= minSettleGap)
}

// sample takes one reading of the kernel's queue table at now: lookup
// returns a queue's line, if it is listed.
func (c *core) sample(now int64, lookup func(uint16) (nfq.KernelStats, bool)) {
	var most float64
	for _, q := range c.qs {
		ks, ok := lookup(q.num)
		most = max(most, c.observe(q, now, ks, ok && ks.PortID == q.portID))
	}
	c.unionSecs += most
}

// observe accounts one sample of queue q and returns the time it was full
// since the previous one.
func (c *core) observe(q *qmon, now int64, ks nfq.KernelStats, bound bool) float64 {
	if !bound {
		q.broken, q.have = true, false
		if q.active {
			q.active, q.pendingEnd = false, true
		}
		return 0
	}
	id := uint32(ks.IDSequence)
	full := ks.QueueTotal >= uint64(q.maxLen)
	var contrib float64
	if q.have && now > q.t {
		sec := float64(now-q.t) / 1e9
		did := id - q.id
		fullA := q.total >= uint64(q.maxLen)
		stalled := now-q.t > stallFactor*c.period
		switch {
		case !stalled && !fullA && !full:
			// Every arrival got in: learn the rate.
			q.win[q.winAt] = interval{ids: uint64(did), ns: now - q.t}
			q.winAt = (q.winAt + 1) % rateWindow
			var ids uint64
			var ns int64
			for _, w := range q.win {
				ids += w.ids
				ns += w.ns
			}
			q.rate = float64(ids) / (float64(ns) / 1e9)
		case fullA || full || float64(did) >= float64(q.maxLen)-float64(q.total):
			// It was full, or may have been (it took in at least the
			// room it had): arrivals beyond those that got in passed.
			est := max(q.rate*sec-float64(did), 0)
			if !q.failClosed { // else dropped, not passed: the kernel counts those
				q.est += est
			}
			if stalled {
				// The monitor did not run: nor, most likely, did the
				// reader. The queue filled at the arrival rate, then
				// passed the rest, for est/rate seconds.
				switch {
				case fullA && full:
					contrib = sec // full at both ends: the reader did not run
				case q.rate > 0:
					contrib = min(sec, est/q.rate)
				}
				if est >= 1 {
					// The start is seen only now, after the stall:
					// say so at once (at most once a second); the
					// end is reported with its count, now if the
					// reader has drained the queue already.
					if !q.active && !q.startLogged && !q.failClosed && c.log != nil && now-q.lastLog >= failOpenLogEvery {
						c.log.Warn(fmt.Sprintf("nfq: queue %d filled while packetshaper was stalled for %.1fs: packets passed without a verdict (fail-open)", q.num, sec),
							"queue", q.num, "queue_maxlen", q.maxLen)
						q.lastLog, q.startLogged = now, true
					}
					q.stall += sec
					if !full {
						q.pendingEnd, c.wantSet = true, true
					}
				}
			} else {
				contrib = sec * (b2f(fullA) + b2f(full)) / 2
			}
		}
		q.idSince += uint64(did)
		q.mayFull = q.mayFull || fullA || full || stalled || float64(did) >= float64(q.maxLen)-float64(q.total)
	}
	q.secs += contrib
	q.secsSince += contrib
	q.have, q.t, q.total, q.id, q.drops = true, now, ks.QueueTotal, id, ks.QueueDropped
	switch {
	case full && !q.active:
		q.active = true
		q.episodes++
		// Not after an end not yet reported: that report will say how
		// many episodes it covers.
		if now-q.lastLog >= failOpenLogEvery && !q.pendingEnd && c.log != nil {
			what := "packets pass without a verdict (fail-open)"
			if q.failClosed {
				what = "packets are dropped (fail-closed)"
			}
			c.log.Warn(fmt.Sprintf("nfq: queue %d full: %s", q.num, what),
				"queue", q.num, "queue_maxlen", q.maxLen)
			q.lastLog, q.startLogged = now, true
		}
	case !full && q.active:
		q.active, q.pendingEnd = false, true
		c.wantSet = true
	}
	return contrib
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// report logs what queue q passed since its last report, if anything and
// if a line is allowed (force: at stop).
func (c *core) report(q *qmon, now int64, force bool) {
	passed := q.passed() - q.repPassed
	if !q.pendingEnd && (passed == 0 || q.active) {
		return
	}
	if c.log == nil || (!force && now-q.lastLog < failOpenLogEvery) {
		return
	}
	if passed == 0 && !q.startLogged && !q.active {
		// Full for a moment without passing anything, and not
		// announced: nothing to say.
		q.pendingEnd, q.episodes, q.stall = false, 0, 0
		return
	}
	secs := q.secs - q.repSecs
	exact := !q.repEst && q.group.exactOK
	how := "exact, from the rule counters"
	if !exact {
		how = "estimated from the arrival rate"
	}
	var msg string
	switch {
	case q.failClosed:
		msg = fmt.Sprintf("nfq: queue %d: no longer full after %.1fs (fail-closed: it dropped what did not fit)", q.num, secs)
	case q.active:
		msg = fmt.Sprintf("nfq: queue %d: fail-open: %d packets passed without a verdict in %.1fs (%s); full again", q.num, passed, secs, how)
	case q.stall > 0:
		msg = fmt.Sprintf("nfq: queue %d: fail-open ended: %d packets passed without a verdict in %.1fs, while packetshaper was stalled for %.1fs (%s)", q.num, passed, secs, q.stall, how)
	case q.episodes == 0:
		msg = fmt.Sprintf("nfq: queue %d: %d packets passed without a verdict (fail-open) while the queue filled up between samples (%s)", q.num, passed, how)
	default:
		msg = fmt.Sprintf("nfq: queue %d: fail-open ended: %d packets passed without a verdict in %.1fs (%s)", q.num, passed, secs, how)
	}
	attrs := []any{"queue", q.num, KeySecs, math.Round(secs*1000) / 1000, KeyPassed, passed, KeyExact, exact}
	if q.episodes > 1 {
		attrs = append(attrs, "episodes", q.episodes)
	}
	c.log.Warn(msg, attrs...)
	q.lastLog, q.pendingEnd, q.episodes, q.stall, q.repEst, q.startLogged = now, false, 0, 0, false, false
	q.repSecs, q.repPassed = q.secs, q.passed()
	if q.active {
		q.episodes = 1
	}
}

// finish takes the last sample and settle (the caller has done both) and
// reports what is left, regardless of the log rate.
func (c *core) finish(now int64) {
	c.finished = true
	for _, q := range c.qs {
		if q.active {
			q.active, q.pendingEnd = false, true
		}
		c.report(q, now, true)
	}
}

// total sums the stats of every queue: Secs is the time at least one was
// full, Exact that all are exact, Active that one is full.
func (c *core) total() FailOpenStats {
	t := FailOpenStats{Secs: c.unionSecs, Exact: len(c.qs) > 0}
	for _, q := range c.qs {
		s := q.stats()
		t.Passed += s.Passed
		t.Exact = t.Exact && s.Exact
		t.Active = t.Active || s.Active
	}
	return t
}
