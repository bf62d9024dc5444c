package daemon

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/global"
	"github.com/packetshaper/packetshaper/nfq"
)

//go:generate go test -run ^TestMetricsReference$ . -args -update-reference

// The counters, declared once.
//
// Each entry of counters is one counter: its stats-line key, its metric
// family, its help, its type, its scope and how to read it. The stats line
// (statsAttrs), the Prometheus collector (collector), the control socket's
// status (state.Status, StatusRuleColumns) and the metrics reference
// (docs/metrics-reference.md, MetricsReference) all iterate over it: a new
// counter is one entry here, plus, for status, a field of control.Queue or
// control.Rule. The engine's own counters (shaper.Stats, shaper.RuleStats)
// stay plain structs filled on the hot path; these getters read the
// snapshots of them.

// namespace is the metrics' prefix: every family is
// packetshaper_[SUBSYSTEM_]NAME.
const namespace = "packetshaper"

// metric is the family name of name (with a subsystem, "rule", or ""):
// prometheus.BuildFQName(namespace, sub, name). A counter's family is its
// countname's name where the two agree ("packets" gives
// packetshaper_packets_total).
func metric(sub, name string) string { return prometheus.BuildFQName(namespace, sub, name) }

// kind is a counter's type.
type kind uint8

const (
	kCounter kind = iota // only grows
	kGauge               // goes up and down
	kFlag                // a gauge of 0 or 1 (true or false in the stats line)
)

func (k kind) String() string {
	switch k {
	case kCounter:
		return "counter"
	case kGauge:
		return "gauge"
	}
	return "gauge (0 or 1)"
}

// scope says what a counter counts, and groups the stats line.
type scope uint8

const (
	scopeQueue    scope = iota // a queue and the kernel's view of it
	scopeEngine                // the engine deciding for all the queues
	scopeFailOpen              // what the kernel passed without a verdict
	scopeOffload               // --offload
	scopeShaping               // held packets and delays
	scopeLatency               // --latency
	scopeGlobal                // the global rules' store, for the whole process
	scopeRule                  // per rule
	scopeTotal                 // per total (a rule's [rule.total], a [[total]])
)

var scopeNames = [...]string{"queue", "engine", "fail-open", "offload", "shaping", "latency", "global", "rule", "total"}

func (s scope) String() string { return scopeNames[s] }

// from is where a counter's value is read, which gives its metric's labels.
type from uint8

const (
	fromQueue      from = iota // a queueSample: label queue
	fromEngine                 // the engine's snapshot: label queue, the queues it serves
	fromRule                   // a rule of the engine's snapshot: labels queue, rule, path
	fromGlobalRule             // a global rule's lease state: label rule
	fromStore                  // the global rules' store client: no label
	fromOffload                // the offloader: no label
	fromTotal                  // a total of the engine's snapshot: labels queue, total
)

var fromLabels = [...][]string{
	fromQueue: {"queue"}, fromEngine: {"queue"}, fromRule: {"queue", "rule", "path"},
	fromGlobalRule: {"rule"}, fromStore: nil, fromOffload: nil, fromTotal: {"queue", "total"},
}

// format is how the stats line shows a value.
type format uint8

const (
	fInt    format = iota // an integer
	fSecs                 // seconds, to the ms ("%.3f")
	fMicros               // a time in seconds, shown in µs ("%.0f")
	fBool                 // true or false
	fRatio                // "%.3f"
	fRate                 // "%.4g"
	fMode                 // leases (0) or fallback (1)
)

// merge is how the stats line combines a counter of several queues.
type merge uint8

const (
	mSum   merge = iota // added up
	mMax                // the largest
	mTotal              // read from the totals sample (totalSample): fail-open over all queues, the worst queue's quantiles
)

// counter is one counter.
type counter struct {
	Key    string // in the stats line ("rule.NAME.KEY" for a rule's); "" for none
	Metric string // the Prometheus family; "" for none
	Help   string
	Kind   kind
	Scope  scope
	from   from
	fmt    format
	merge  merge
	// omitZero leaves a zero out of the stats line also when every
	// counter is shown (the final line).
	omitZero bool
	// globalOnly: in a rule's stats only when the rule is global.
	globalOnly bool
	get        func(*src) float64
	// Status: the control.Queue (fromQueue, fromEngine) or control.Rule
	// (fromRule) field it fills, and the column of `packetshaper
	// status`'s rule table that shows it ("" for none).
	queueField func(*control.Queue) *uint64
	ruleField  func(*control.Rule) *uint64
	Column     string
	// totalField: the control.Total field a fromTotal counter fills.
	totalField func(*control.Total) *uint64
}

// src is what a getter reads: the field of its from.
type src struct {
	q   *queueSample
	e   *snapshot
	r   *ruleSnap
	g   *global.RuleStats
	gs  *global.Stats
	off *offloadSample
	t   *totalSnap
}

// offloadSample is what the metrics and the stats line read of the
// offloader.
type offloadSample struct {
	offloaded, active, kernelDrops, lost, errors uint64
}

func u(v uint64) float64 { return float64(v) }

func secs(d time.Duration) float64 { return d.Seconds() }

func ns(v int64) float64 { return float64(v) / 1e9 }

// counters are all the counters, in the stats line's order.
var counters = []counter{
	// Queue.
	{Key: countname.Packets, Metric: metric("", countname.Packets+"_total"), Help: "Packets decided.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Packets) }, queueField: func(q *control.Queue) *uint64 { return &q.Packets }},
	{Key: countname.Accepted, Metric: metric("", countname.Accepted+"_total"), Help: "Packets accepted.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Accepted) }, queueField: func(q *control.Queue) *uint64 { return &q.Accepted }},
	{Key: countname.Dropped, Metric: metric("", countname.Dropped+"_total"), Help: "Packets dropped.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Dropped) }, queueField: func(q *control.Queue) *uint64 { return &q.Dropped }},
	// Engine.
	{Key: countname.Malformed, Metric: metric("", countname.Malformed+"_total"), Help: "Packets whose IP header is invalid.", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Malformed) }, queueField: func(q *control.Queue) *uint64 { return &q.Malformed }},
	{Key: countname.NoPorts, Metric: metric("", countname.NoPorts+"_total"), Help: "Packets whose ports could not be read, limited by address and protocol.", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.NoPorts) }},
	{Key: countname.Unmatched, Metric: metric("", countname.Unmatched+"_total"), Help: "Packets no rule matched (accepted).", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Unmatched) }, queueField: func(q *control.Queue) *uint64 { return &q.Unmatched }},
	{Key: countname.Flows, Metric: metric("", countname.Flows), Help: "Flows in the flow tables (with --fastpath, the kernel's flow maps' too).", Kind: kGauge, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Flows) }, queueField: func(q *control.Queue) *uint64 { return &q.Flows }},
	{Key: countname.Evictions, Metric: metric("", "flow_evictions_total"), Help: "Flows evicted from a full table (with --fastpath, the kernel's too: an upper bound).", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Evictions) }},
	{Key: countname.Expired, Metric: metric("", "flow_expirations_total"), Help: "Flows forgotten after their idle timeout.", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Expired) }},
	{Metric: metric("", "offload_reports_total"), Help: "Flows reported for offload by the engine.", Kind: kCounter, Scope: scopeEngine, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Offloads) }},
	// The kernel's view of the queue, and the socket.
	{Key: countname.Queued, Metric: metric("", "queue_packets"), Help: "Packets the kernel holds in the queue waiting for a verdict (queued).", Kind: kGauge, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.kernel.QueueTotal) }, queueField: func(q *control.Queue) *uint64 { return &q.Queued }},
	{Key: countname.QueueDrops, Metric: metric("", countname.QueueDrops+"_total"), Help: "Packets the kernel dropped because the queue was full (fail-closed; queue_drops).", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.kernel.QueueDropped) }, queueField: func(q *control.Queue) *uint64 { return &q.QueueDrops }},
	{Key: countname.SocketDrops, Metric: metric("", countname.SocketDrops+"_total"), Help: "Packets the kernel could not send to the socket (socket_drops).", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.kernel.UserDropped) }, queueField: func(q *control.Queue) *uint64 { return &q.SocketDrops }},
	{Key: countname.Lost, Metric: metric("", countname.Lost+"_total"), Help: "Packets queued by the kernel that never reached packetshaper (socket buffer full).", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Lost) }, queueField: func(q *control.Queue) *uint64 { return &q.Lost }},
	{Key: countname.Enobufs, Metric: metric("", countname.Enobufs+"_total"), Help: "Socket receive buffer overruns.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.ENOBUFS) }},
	{Key: countname.StopAccepted, Metric: metric("", countname.StopAccepted+"_total"), Help: "Packets still queued when the queue stopped, past the drain deadline, accepted at once by one batch verdict (their marks unchanged).", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.StopAccepted) }},
	{Key: countname.Errors, Metric: metric("", countname.Errors+"_total"), Help: "Receive and verdict errors.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Errors) }, queueField: func(q *control.Queue) *uint64 { return &q.Errors }},
	{Key: countname.Batches, Metric: metric("", countname.Batches+"_total"), Help: "Batches of packets decided.", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.Batches) }},
	{Key: countname.VerdictMsgs, Metric: metric("", "verdict_messages_total"), Help: "Verdict messages sent (one per run of equal verdicts in a batch).", Kind: kCounter, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.VerdictMsgs) }},
	{Metric: metric("", "queue_bound"), Help: "1 if the kernel lists the queue as bound to packetshaper's socket.", Kind: kFlag, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return b2f(s.q.bound) }},
	{Metric: metric("", "queue_max_packets"), Help: "The queue's length: beyond it packets pass without a verdict (fail-open) or are dropped (fail-closed).", Kind: kGauge, Scope: scopeQueue, from: fromQueue,
		get: func(s *src) float64 { return float64(s.q.maxLen) }},
	// Fail-open.
	{Key: failopen.KeySecs, Metric: metric("", "failopen_seconds_total"), Help: "Time the queue was full, to within 0.1 s.", Kind: kCounter, Scope: scopeFailOpen, from: fromQueue, fmt: fSecs, merge: mTotal,
		get: func(s *src) float64 { return s.q.failOpen.Secs }},
	{Key: failopen.KeyPassed, Metric: metric("", failopen.KeyPassed+"_total"), Help: "Packets the kernel let through without a verdict (fail-open): the queue was full, or the socket's receive buffer was (lost).", Kind: kCounter, Scope: scopeFailOpen, from: fromQueue, merge: mTotal,
		get: func(s *src) float64 { return u(s.q.failOpen.Passed) }, queueField: func(q *control.Queue) *uint64 { return &q.FailOpenPassed }},
	{Key: failopen.KeyExact, Metric: metric("", failopen.KeyExact), Help: "1 if failopen_passed is exact (from the queueing rules' counters), 0 if estimated from the arrival rate.", Kind: kFlag, Scope: scopeFailOpen, from: fromQueue, fmt: fBool, merge: mTotal,
		get: func(s *src) float64 { return b2f(s.q.failOpen.Exact) }},
	{Metric: metric("", "failopen_active"), Help: "1 while the queue is full.", Kind: kFlag, Scope: scopeFailOpen, from: fromQueue,
		get: func(s *src) float64 { return b2f(s.q.failOpen.Active) }},
	// Offload (with --offload).
	{Key: countname.Offloaded, Metric: metric("", countname.Offloaded+"_total"), Help: "Flows put in the kernel offload sets.", Kind: kCounter, Scope: scopeOffload, from: fromOffload,
		get: func(s *src) float64 { return u(s.off.offloaded) }},
	{Key: countname.OffloadActive, Metric: metric("", countname.OffloadActive), Help: "Offloaded flows not yet expired.", Kind: kGauge, Scope: scopeOffload, from: fromOffload,
		get: func(s *src) float64 { return u(s.off.active) }},
	{Key: countname.OffloadKernelDrops, Metric: metric("", countname.OffloadKernelDrops+"_total"), Help: "Packets the kernel offload rules dropped (all processes using the table).", Kind: kCounter, Scope: scopeOffload, from: fromOffload,
		get: func(s *src) float64 { return u(s.off.kernelDrops) }},
	{Key: countname.OffloadLost, Metric: metric("", countname.OffloadLost+"_total"), Help: "Flows to offload that found the offloader's buffer or set share full.", Kind: kCounter, Scope: scopeOffload, from: fromOffload,
		get: func(s *src) float64 { return u(s.off.lost) }},
	{Key: countname.OffloadErrors, Metric: metric("", countname.OffloadErrors+"_total"), Help: "Failed offload requests.", Kind: kCounter, Scope: scopeOffload, from: fromOffload,
		get: func(s *src) float64 { return u(s.off.errors) }},
	// Shaping.
	{Key: countname.Held, Metric: metric("", countname.Held), Help: "Packets held in the kernel's queue for a later verdict (shaping).", Kind: kGauge, Scope: scopeShaping, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.hold.Held) }},
	{Key: countname.HeldPeak, Metric: metric("", countname.HeldPeak), Help: "The most packets held at once since start.", Kind: kGauge, Scope: scopeShaping, from: fromQueue, merge: mMax,
		get: func(s *src) float64 { return u(s.q.hold.Peak) }},
	{Key: countname.MaxHeld, Metric: metric("", "held_max"), Help: "The most packets the queue may hold at once (--max-held).", Kind: kGauge, Scope: scopeShaping, from: fromQueue,
		get: func(s *src) float64 { return float64(s.q.hold.MaxHeld) }},
	{Key: countname.Delayed, Metric: metric("", countname.Delayed+"_total"), Help: "Packets shaping rules accepted later than they arrived.", Kind: kCounter, Scope: scopeShaping, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.Delayed) }},
	{Key: countname.ShapeOverflow, Metric: metric("", countname.ShapeOverflow+"_total"), Help: "Packets shaping rules dropped: their queue was full (max-delay) or --max-held packets were held.", Kind: kCounter, Scope: scopeShaping, from: fromEngine,
		get: func(s *src) float64 { return u(s.e.ShapeOverflow) }},
	{Key: countname.DelayP50Us, Help: "The median delay shaping rules gave packets.", Kind: kGauge, Scope: scopeShaping, from: fromEngine, fmt: fMicros,
		get: func(s *src) float64 { return ns(s.e.delays.P50) }},
	{Key: countname.DelayP99Us, Help: "The 99th percentile of the delays shaping rules gave packets.", Kind: kGauge, Scope: scopeShaping, from: fromEngine, fmt: fMicros,
		get: func(s *src) float64 { return ns(s.e.delays.P99) }},
	{Key: countname.DelayMaxUs, Metric: metric("", "shape_delay_max_seconds"), Help: "The longest delay a shaping rule gave a packet.", Kind: kGauge, Scope: scopeShaping, from: fromEngine, fmt: fMicros,
		get: func(s *src) float64 { return ns(s.e.delays.Max) }},
	{Key: countname.LateP50Us, Help: "The median lateness of held packets' verdicts after their departure time (the worst queue's).", Kind: kGauge, Scope: scopeShaping, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.hold.Late.P50) }},
	{Key: countname.LateP99Us, Help: "The 99th percentile of the lateness of held packets' verdicts (the worst queue's).", Kind: kGauge, Scope: scopeShaping, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.hold.Late.P99) }},
	{Key: countname.LateMaxUs, Metric: metric("", "release_late_max_seconds"), Help: "The latest a held packet got its verdict after its departure time.", Kind: kGauge, Scope: scopeShaping, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.hold.Late.Max) }},
	// Verdict latency (with --latency; the metric is a histogram: distributions).
	{Key: countname.LatCount, Help: "Packets whose verdict latency was measured.", Kind: kCounter, Scope: scopeLatency, from: fromQueue,
		get: func(s *src) float64 { return u(s.q.latency.Count) }},
	{Key: countname.LatP50Us, Help: "The median verdict latency (the worst queue's).", Kind: kGauge, Scope: scopeLatency, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.latency.P50) }},
	{Key: countname.LatP99Us, Help: "The 99th percentile of the verdict latency (the worst queue's).", Kind: kGauge, Scope: scopeLatency, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.latency.P99) }},
	{Key: countname.LatMaxUs, Help: "The longest verdict latency (the worst queue's).", Kind: kGauge, Scope: scopeLatency, from: fromQueue, fmt: fMicros, merge: mTotal,
		get: func(s *src) float64 { return secs(s.q.latency.Max) }},
	// The global rules' store.
	{Key: countname.RedisCommands, Metric: metric("", countname.RedisCommands+"_total"), Help: "Requests sent to the global rules' store (one per ask, SCRIPT LOAD, PING).", Kind: kCounter, Scope: scopeGlobal, from: fromStore,
		get: func(s *src) float64 { return u(s.gs.Commands) }},
	{Key: countname.RedisErrors, Metric: metric("", countname.RedisErrors+"_total"), Help: "Requests to the store that failed or timed out.", Kind: kCounter, Scope: scopeGlobal, from: fromStore,
		get: func(s *src) float64 { return u(s.gs.Errors) }},
	// Totals.
	{Key: countname.Packets, Metric: metric("total", countname.Packets+"_total"), Help: "Packets of a total's rules that met the total.", Kind: kCounter, Scope: scopeTotal, from: fromTotal,
		get: func(s *src) float64 { return u(s.t.Packets) }, totalField: func(t *control.Total) *uint64 { return &t.Packets }},
	{Key: countname.Accepted, Metric: metric("total", countname.Accepted+"_total"), Help: "Packets a total passed and was charged for (their flow's limit passed them too).", Kind: kCounter, Scope: scopeTotal, from: fromTotal,
		get: func(s *src) float64 { return u(s.t.Accepted) }, totalField: func(t *control.Total) *uint64 { return &t.Accepted }},
	{Key: countname.Dropped, Metric: metric("total", countname.Dropped+"_total"), Help: "Packets over a total (dropped, or accepted by a shadow or marking rule).", Kind: kCounter, Scope: scopeTotal, from: fromTotal,
		get: func(s *src) float64 { return u(s.t.Dropped) }, totalField: func(t *control.Total) *uint64 { return &t.Dropped }},
	// Rules.
	{Key: countname.Packets, Metric: metric("rule", countname.Packets+"_total"), Help: "Packets a rule decided.", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "PACKETS",
		get: func(s *src) float64 { return u(s.r.Packets) }, ruleField: func(r *control.Rule) *uint64 { return &r.Packets }},
	{Key: countname.Accepted, Metric: metric("rule", countname.Accepted+"_total"), Help: "Packets a rule accepted.", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "ACCEPTED",
		get: func(s *src) float64 { return u(s.r.Accepted) }, ruleField: func(r *control.Rule) *uint64 { return &r.Accepted }},
	{Key: countname.Dropped, Metric: metric("rule", countname.Dropped+"_total"), Help: "Packets a rule dropped.", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "DROPPED",
		get: func(s *src) float64 { return u(s.r.Dropped) }, ruleField: func(r *control.Rule) *uint64 { return &r.Dropped }},
	{Key: countname.ShadowDropped, Metric: metric("rule", countname.ShadowDropped+"_total"), Help: "Packets a shadow rule accepted that it would have dropped.", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "SHADOW",
		get: func(s *src) float64 { return u(s.r.ShadowDropped) }, ruleField: func(r *control.Rule) *uint64 { return &r.ShadowDropped }},
	{Key: countname.Marked, Metric: metric("rule", countname.Marked+"_total"), Help: "Packets over a rule's limit accepted with a new mark.", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "MARKED",
		get: func(s *src) float64 { return u(s.r.Marked) }, ruleField: func(r *control.Rule) *uint64 { return &r.Marked }},
	{Key: countname.Flows, Metric: metric("rule", countname.Flows), Help: "Flows in a rule's table (path kernel: in its flow map, counted every second, less often for big maps).", Kind: kGauge, Scope: scopeRule, from: fromRule, Column: "FLOWS",
		get: func(s *src) float64 { return u(s.r.Flows) }, ruleField: func(r *control.Rule) *uint64 { return &r.Flows }},
	{Key: countname.Evictions, Metric: metric("rule", "flow_evictions_total"), Help: "Flows evicted from a rule's full table (path kernel: an upper bound, the flows inserted less those present).", Kind: kCounter, Scope: scopeRule, from: fromRule, Column: "EVICTIONS",
		get: func(s *src) float64 { return u(s.r.Evictions) }, ruleField: func(r *control.Rule) *uint64 { return &r.Evictions }},
	{Key: countname.Expired, Metric: metric("rule", "flow_expirations_total"), Help: "Flows of a rule forgotten after their idle timeout.", Kind: kCounter, Scope: scopeRule, from: fromRule,
		get: func(s *src) float64 { return u(s.r.Expired) }, ruleField: func(r *control.Rule) *uint64 { return &r.Expired }},
	{Key: countname.Delayed, Metric: metric("rule", countname.Delayed+"_total"), Help: "Packets a shaping rule accepted later than they arrived.", Kind: kCounter, Scope: scopeRule, from: fromRule,
		get: func(s *src) float64 { return u(s.r.Delayed) }},
	{Key: countname.ShapeOverflow, Metric: metric("rule", countname.ShapeOverflow+"_total"), Help: "Packets a shaping rule dropped because its queue was full.", Kind: kCounter, Scope: scopeRule, from: fromRule,
		get: func(s *src) float64 { return u(s.r.ShapeOverflow) }},
	{Key: countname.FallbackPackets, Metric: metric("rule", countname.FallbackPackets+"_total"), Help: "Packets of a global rule decided by its local fallback limit (the store unreachable).", Kind: kCounter, Scope: scopeRule, from: fromRule, globalOnly: true,
		get: func(s *src) float64 { return u(s.r.Fallback) }},
	// Global rules' lease state.
	{Key: countname.GlobalMode, Metric: metric("rule", "global_fallback"), Help: "1 while a global rule limits locally (its store unreachable), 0 on leases.", Kind: kFlag, Scope: scopeRule, from: fromGlobalRule, fmt: fMode,
		get: func(s *src) float64 { return b2f(s.g.Fallback) }},
	{Key: countname.FallbackRate, Metric: metric("rule", "global_fallback_rate"), Help: "A global rule's local limit in fallback (packets or bytes per second), 0 on leases.", Kind: kGauge, Scope: scopeRule, from: fromGlobalRule, fmt: fRate, omitZero: true,
		get: func(s *src) float64 { return s.g.FallbackRate }},
	{Key: countname.GlobalKeys, Metric: metric("rule", countname.GlobalKeys), Help: "Keys of a global rule with a lease on this host.", Kind: kGauge, Scope: scopeRule, from: fromGlobalRule,
		get: func(s *src) float64 { return float64(s.g.Keys) }},
	{Key: countname.GlobalAsks, Metric: metric("rule", countname.GlobalAsks+"_total"), Help: "Lease asks sent to the store (one command each).", Kind: kCounter, Scope: scopeRule, from: fromGlobalRule,
		get: func(s *src) float64 { return u(s.g.Asks) }},
	{Key: countname.GlobalGranted, Metric: metric("rule", countname.GlobalGranted+"_total"), Help: "Tokens (packets or bytes) the store granted to this host.", Kind: kCounter, Scope: scopeRule, from: fromGlobalRule,
		get: func(s *src) float64 { return u(s.g.Granted) }},
	{Key: countname.RedisErrors, Metric: metric("rule", countname.RedisErrors+"_total"), Help: "Lease asks that failed or timed out.", Kind: kCounter, Scope: scopeRule, from: fromGlobalRule,
		get: func(s *src) float64 { return u(s.g.Errors) }},
	{Key: countname.GlobalShare, Metric: metric("rule", countname.GlobalShare), Help: "This host's recent share of a global rule's grants.", Kind: kGauge, Scope: scopeRule, from: fromGlobalRule, fmt: fRatio,
		get: func(s *src) float64 { return s.g.Share }},
	{Key: countname.GlobalHosts, Metric: metric("rule", countname.GlobalHosts), Help: "The most hosts seen asking for one key of a global rule.", Kind: kGauge, Scope: scopeRule, from: fromGlobalRule,
		get: func(s *src) float64 { return float64(s.g.Hosts) }},
}

// distribution is a histogram family: what it measures, per queue
// (fromQueue) or of the engine (fromEngine).
type distribution struct {
	Metric, Help string
	Scope        scope
	from         from
	// latency: emitted only with --latency.
	latency bool
	get     func(*src) histogram
}

// histogram is a cumulative histogram in seconds over bounds.
type histogram struct {
	count   uint64
	sum     float64 // seconds
	buckets map[float64]uint64
}

// distributions are the histogram families.
var distributions = []distribution{
	{Metric: metric("", "verdict_latency_seconds"), Help: "Time from a packet entering the network stack to its verdict (with --latency; kept to 1 µs below 1 ms, to 1/16 above).",
		Scope: scopeLatency, from: fromQueue, latency: true, get: func(s *src) histogram { return s.q.latencyHist }},
	{Metric: metric("", "shape_delay_seconds"), Help: "Delays shaping rules gave packets (from arrival to departure time).",
		Scope: scopeShaping, from: fromEngine, get: func(s *src) histogram { return cumulative(s.e.delayHist, delayBounds) }},
	{Metric: metric("", "release_late_seconds"), Help: "How late held packets got their verdicts after their departure time.",
		Scope: scopeShaping, from: fromQueue, get: func(s *src) histogram { return s.q.lateHist }},
}

// cumulative makes a histogram of a nfq.LatencyHistogram over bounds.
func cumulative(h nfq.LatencyHistogram, bounds []time.Duration) histogram {
	out := histogram{count: h.Count, sum: h.Sum.Seconds(), buckets: make(map[float64]uint64, len(bounds))}
	for i, b := range bounds {
		if i < len(h.Cumulative) {
			out.buckets[b.Seconds()] = h.Cumulative[i]
		}
	}
	return out
}

// fmtValue is v as the stats line shows it.
func (c *counter) fmtValue(v float64) any {
	switch c.fmt {
	case fSecs:
		return fmt.Sprintf("%.3f", v)
	case fMicros:
		return fmt.Sprintf("%.0f", v*1e6)
	case fBool:
		return v != 0
	case fRatio:
		return fmt.Sprintf("%.3f", v)
	case fRate:
		return fmt.Sprintf("%.4g", v)
	case fMode:
		if v != 0 {
			return "fallback"
		}
		return "leases"
	}
	return uint64(v)
}
