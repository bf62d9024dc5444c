package daemon

import (
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/packetshaper/packetshaper/failopen"
	"github.com/packetshaper/packetshaper/nfq"
)

// The metrics.
//
// A collector emits every value at scrape time (prometheus.MustNewConstMetric)
// from what the shaper keeps anyway: each queue's nfq counters (atomics),
// the kernel's queue table, the fail-open Monitor, the offloader, and the
// snapshots of the engine's counters (published by the queues' goroutines
// at most every 100 ms and when idle). The engine's series (the rules',
// flows, malformed, delays, ...) carry the queue label of the queues the
// engine serves, "20-23" with --queue 20-23: one engine limits each key
// once whichever queue its packets arrive on, and its counters are not
// any one queue's. Nothing is added to the
// per-packet path, and the values are current when no traffic flows.

// latencyBounds are the verdict-latency histogram's buckets.
var latencyBounds = []time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond,
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

type metric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func newMetric(name, help string, typ prometheus.ValueType, labels ...string) metric {
	return metric{prometheus.NewDesc(name, help, labels, nil), typ}
}

// queueMetric is a per-queue series with its value.
type queueMetric struct {
	metric
	get func(*queueSample) float64
}

// engineMetric is a series of an engine's counters with its value.
type engineMetric struct {
	metric
	get func(*snapshot) float64
}

// engineSample is what a scrape reads of one engine: its snapshot, and its
// queue label, the queues it serves ("20-23"; "3" for an engine of one
// queue). The daemon runs one engine for all its queues, so that a key is
// limited once whichever queue its packets arrive on: its counters (the
// rules', flows, malformed, ...) are the engine's, not any one queue's.
type engineSample struct {
	snap  *snapshot
	label string
}

// queueSample is what a scrape reads of one queue.
type queueSample struct {
	nfq.Stats
	snap     *snapshot // its engine's
	first    bool      // the first queue of its engine
	kernel   nfq.KernelStats
	bound    bool
	failOpen failopen.FailOpenStats
	hold     nfq.HoldStats
}

// collector is the daemon's prometheus.Collector.
type collector struct {
	d *state

	queue     []queueMetric
	engine    []engineMetric
	rule      []ruleMetric
	shape     *shapeMetrics
	latency   *prometheus.Desc
	offload   []metric
	reloads   *prometheus.Desc
	lastOK    *prometheus.Desc
	lastOKAt  *prometheus.Desc
	buildInfo *prometheus.Desc
}

type ruleMetric struct {
	metric
	get func(*ruleSnap) uint64
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func newCollector(d *state) *collector {
	c := &collector{d: d, shape: newShapeMetrics()}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	q := func(name, help string, typ prometheus.ValueType, get func(*queueSample) float64) {
		c.queue = append(c.queue, queueMetric{newMetric(name, help, typ, "queue"), get})
	}
	// The engine's counters, labelled by the queues it serves (engineSample).
	e := func(name, help string, typ prometheus.ValueType, get func(*snapshot) float64) {
		c.engine = append(c.engine, engineMetric{newMetric(name, help, typ, "queue"), get})
	}
	// The stats line's counters, per queue.
	q("packetshaper_packets_total", "Packets decided.", counter, func(s *queueSample) float64 { return float64(s.Packets) })
	q("packetshaper_accepted_total", "Packets accepted.", counter, func(s *queueSample) float64 { return float64(s.Accepted) })
	q("packetshaper_dropped_total", "Packets dropped.", counter, func(s *queueSample) float64 { return float64(s.Dropped) })
	e("packetshaper_malformed_total", "Packets whose IP header is invalid.", counter, func(s *snapshot) float64 { return float64(s.Malformed) })
	e("packetshaper_no_ports_total", "Packets whose ports could not be read, limited by address and protocol.", counter, func(s *snapshot) float64 { return float64(s.NoPorts) })
	e("packetshaper_unmatched_total", "Packets no rule matched (accepted).", counter, func(s *snapshot) float64 { return float64(s.Unmatched) })
	e("packetshaper_flows", "Flows in the flow tables.", gauge, func(s *snapshot) float64 { return float64(s.Flows) })
	e("packetshaper_flow_evictions_total", "Flows evicted from a full table.", counter, func(s *snapshot) float64 { return float64(s.Evictions) })
	e("packetshaper_flow_expirations_total", "Flows forgotten after their idle timeout.", counter, func(s *snapshot) float64 { return float64(s.Expired) })
	e("packetshaper_offload_reports_total", "Flows reported for offload by the engine.", counter, func(s *snapshot) float64 { return float64(s.Offloads) })
	q("packetshaper_lost_total", "Packets queued by the kernel that never reached packetshaper (socket buffer full).", counter, func(s *queueSample) float64 { return float64(s.Lost) })
	q("packetshaper_enobufs_total", "Socket receive buffer overruns.", counter, func(s *queueSample) float64 { return float64(s.ENOBUFS) })
	q("packetshaper_stop_accepted_total", "Packets still queued when the queue stopped, past the drain deadline, accepted at once by one batch verdict (their marks unchanged).", counter, func(s *queueSample) float64 { return float64(s.StopAccepted) })
	q("packetshaper_errors_total", "Receive and verdict errors.", counter, func(s *queueSample) float64 { return float64(s.Errors) })
	q("packetshaper_batches_total", "Batches of packets decided.", counter, func(s *queueSample) float64 { return float64(s.Batches) })
	q("packetshaper_verdict_messages_total", "Verdict messages sent (one per run of equal verdicts in a batch).", counter, func(s *queueSample) float64 { return float64(s.VerdictMsgs) })
	// The kernel's view of the queue.
	q("packetshaper_queue_bound", "1 if the kernel lists the queue as bound to packetshaper's socket.", gauge, func(s *queueSample) float64 { return b2f(s.bound) })
	q("packetshaper_queue_packets", "Packets the kernel holds in the queue waiting for a verdict (queued).", gauge, func(s *queueSample) float64 { return float64(s.kernel.QueueTotal) })
	q("packetshaper_queue_max_packets", "The queue's length: beyond it packets pass without a verdict (fail-open) or are dropped (fail-closed).", gauge, func(*queueSample) float64 { return float64(d.maxQueueLen()) })
	q("packetshaper_queue_drops_total", "Packets the kernel dropped because the queue was full (fail-closed; queue_drops).", counter, func(s *queueSample) float64 { return float64(s.kernel.QueueDropped) })
	q("packetshaper_socket_drops_total", "Packets the kernel could not send to the socket (socket_drops).", counter, func(s *queueSample) float64 { return float64(s.kernel.UserDropped) })
	// Fail-open.
	q("packetshaper_failopen_passed_total", "Packets the kernel let through without a verdict (fail-open): the queue was full, or the socket's receive buffer was (lost).", counter, func(s *queueSample) float64 { return float64(s.failOpen.Passed) })
	q("packetshaper_failopen_seconds_total", "Time the queue was full, to within 0.1 s.", counter, func(s *queueSample) float64 { return s.failOpen.Secs })
	q("packetshaper_failopen_exact", "1 if failopen_passed is exact (from the queueing rules' counters), 0 if estimated from the arrival rate.", gauge, func(s *queueSample) float64 { return b2f(s.failOpen.Exact) })
	q("packetshaper_failopen_active", "1 while the queue is full.", gauge, func(s *queueSample) float64 { return b2f(s.failOpen.Active) })

	r := func(name, help string, typ prometheus.ValueType, get func(*ruleSnap) uint64) {
		c.rule = append(c.rule, ruleMetric{newMetric(name, help, typ, "queue", "rule"), get})
	}
	r("packetshaper_rule_packets_total", "Packets a rule decided.", counter, func(r *ruleSnap) uint64 { return r.Packets })
	r("packetshaper_rule_accepted_total", "Packets a rule accepted.", counter, func(r *ruleSnap) uint64 { return r.Accepted })
	r("packetshaper_rule_dropped_total", "Packets a rule dropped.", counter, func(r *ruleSnap) uint64 { return r.Dropped })
	r("packetshaper_rule_shadow_dropped_total", "Packets a shadow rule accepted that it would have dropped.", counter, func(r *ruleSnap) uint64 { return r.ShadowDropped })
	r("packetshaper_rule_marked_total", "Packets over a rule's limit accepted with a new mark.", counter, func(r *ruleSnap) uint64 { return r.Marked })
	r("packetshaper_rule_flows", "Flows in a rule's table.", gauge, func(r *ruleSnap) uint64 { return r.Flows })
	r("packetshaper_rule_flow_evictions_total", "Flows evicted from a rule's full table.", counter, func(r *ruleSnap) uint64 { return r.Evictions })
	r("packetshaper_rule_fallback_packets_total", "Packets of a global rule decided by its local fallback limit (the store unreachable).", counter, func(r *ruleSnap) uint64 { return r.Fallback })
	r("packetshaper_rule_flow_expirations_total", "Flows of a rule forgotten after their idle timeout.", counter, func(r *ruleSnap) uint64 { return r.Expired })

	c.latency = prometheus.NewDesc("packetshaper_verdict_latency_seconds",
		"Time from a packet entering the network stack to its verdict (with --latency; kept to 1 µs below 1 ms, to 1/16 above).", []string{"queue"}, nil)

	c.offload = []metric{
		newMetric("packetshaper_offloaded_total", "Flows put in the kernel offload sets.", counter),
		newMetric("packetshaper_offload_active", "Offloaded flows not yet expired.", gauge),
		newMetric("packetshaper_offload_kernel_drops_total", "Packets the kernel offload rules dropped (all processes using the table).", counter),
		newMetric("packetshaper_offload_lost_total", "Flows to offload that found the offloader's buffer or set share full.", counter),
		newMetric("packetshaper_offload_errors_total", "Failed offload requests.", counter),
	}

	c.reloads = prometheus.NewDesc("packetshaper_reloads_total", "Policy reloads (SIGHUP), by result: ok, or failed (the previous policy kept).", []string{"result"}, nil)
	c.lastOK = prometheus.NewDesc("packetshaper_last_reload_successful", "1 unless the last reload failed.", nil, nil)
	c.lastOKAt = prometheus.NewDesc("packetshaper_last_reload_success_timestamp_seconds", "When the policy in force was loaded (start or last successful reload).", nil, nil)
	c.buildInfo = prometheus.NewDesc("packetshaper_build_info", "Always 1: the version of packetshaper and the Go it was built with.", []string{"version", "goversion"}, nil)
	return c
}

// Describe sends every descriptor (some are emitted only with --latency or
// --offload).
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.queue {
		ch <- m.desc
	}
	for _, m := range c.engine {
		ch <- m.desc
	}
	for _, m := range c.rule {
		ch <- m.desc
	}
	c.shape.describe(ch)
	ch <- c.latency
	for _, m := range c.offload {
		ch <- m.desc
	}
	ch <- c.reloads
	ch <- c.lastOK
	ch <- c.lastOKAt
	ch <- c.buildInfo
}

// Collect reads the values now.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	samples := make([]queueSample, len(d.ws))
	for i, w := range d.ws {
		samples[i] = d.sample(w)
	}
	for _, m := range c.queue {
		for i, w := range d.ws {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.get(&samples[i]), strconv.Itoa(int(w.queue)))
		}
	}
	var engs []engineSample
	for _, sh := range engines(d.ws) {
		engs = append(engs, engineSample{snap: sh.snap.Load(), label: sh.label()})
	}
	for _, m := range c.engine {
		for _, es := range engs {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.get(es.snap), es.label)
		}
	}
	for _, m := range c.rule {
		for _, es := range engs {
			for j := range es.snap.rules {
				r := &es.snap.rules[j]
				ch <- prometheus.MustNewConstMetric(m.desc, m.typ, float64(m.get(r)), es.label, r.name)
			}
		}
	}
	if d.cfg.Queue.Latency {
		for _, w := range d.ws {
			h := w.q.LatencyHistogram(latencyBounds)
			buckets := make(map[float64]uint64, len(latencyBounds))
			for i, b := range latencyBounds {
				buckets[b.Seconds()] = h.Cumulative[i]
			}
			ch <- prometheus.MustNewConstHistogram(c.latency, h.Count, h.Sum.Seconds(), buckets, strconv.Itoa(int(w.queue)))
		}
	}
	c.shape.collect(ch, d.ws, samples, engs)
	if d.off != nil {
		ost := d.off.Stats()
		kd, _, _ := d.off.KernelDrops()
		for i, v := range []uint64{ost.Offloaded, ost.Active, kd, ost.Lost + ost.Full, ost.Errors} {
			ch <- prometheus.MustNewConstMetric(c.offload[i].desc, c.offload[i].typ, float64(v))
		}
	}
	ok, failed, last := d.reloadCounts()
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(ok), "ok")
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(c.lastOK, prometheus.GaugeValue, b2f(last == nil || last.ok))
	ch <- prometheus.MustNewConstMetric(c.lastOKAt, prometheus.GaugeValue, float64(d.loadedAt().UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, d.cfg.Version, runtime.Version())
}

// metricsHandler serves the daemon's metrics, the Go runtime's and the
// process's, the global rules' (lease state, the store's errors), and
// those of cfg.Collectors.
func metricsHandler(d *state) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	cs := []prometheus.Collector{
		newCollector(d),
		newGlobalCollector(d.gl),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range append(cs, d.cfg.Collectors...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}), nil
}
