package daemon

import (
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/global"
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

// latencyBounds are the verdict-latency and release-lateness histograms'
// buckets.
var latencyBounds = []time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond,
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// delayBounds are the shaping-delay histogram's buckets (delays are at most
// shaper.MaxMaxDelay, 10 s).
var delayBounds = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// delayBoundsNS are delayBounds in ns, as shaper.Engine.DelayHistogram
// takes them.
var delayBoundsNS = func() []int64 {
	b := make([]int64, len(delayBounds))
	for i, d := range delayBounds {
		b[i] = int64(d)
	}
	return b
}()

// queueSample is what a scrape reads of one queue.
type queueSample struct {
	nfq.Stats
	kernel   nfq.KernelStats
	bound    bool
	maxLen   uint32
	failOpen failopen.FailOpenStats
	hold     nfq.HoldStats
	latency  nfq.LatencyStats
	// The histograms: of the verdict latency (only with --latency) and of
	// how late held packets were released.
	latencyHist, lateHist histogram
}

// daemonFamily is a metric of the daemon's own state (reloads, build), not
// a counter of the packets.
type daemonFamily struct {
	Metric, Help string
	Kind         kind
	labels       []string
}

var daemonFamilies = []daemonFamily{
	{metric("", "reloads_total"), "Policy reloads (SIGHUP), by result: ok, or failed (the previous policy kept).", kCounter, []string{"result"}},
	{metric("", "last_reload_successful"), "1 unless the last reload failed.", kFlag, nil},
	{metric("", "last_reload_success_timestamp_seconds"), "When the policy in force was loaded (start or last successful reload).", kGauge, nil},
	{metric("", "build_info"), "Always 1: the version of packetshaper and the Go it was built with.", kGauge, []string{"version", "goversion"}},
	{metric("", "rule_info"), "Always 1, per rule: its action, algorithm, whether it shapes (true: holds what exceeds the rate) or polices (false: drops it), and its rate as written (\"10 Mbit/s\", \"100 packets/s\").", kGauge, []string{"queue", "rule", "path", "action", "algorithm", "shape", "rate"}},
}

// collector is the daemon's prometheus.Collector: the counters, the
// distributions and the daemon's families, each emitted at scrape time.
type collector struct {
	d      *state
	descs  []*prometheus.Desc // of counters (nil: no metric)
	dists  []*prometheus.Desc // of distributions
	daemon []*prometheus.Desc // of daemonFamilies
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (k kind) valueType() prometheus.ValueType {
	if k == kCounter {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

func newCollector(d *state) *collector {
	c := &collector{d: d, descs: make([]*prometheus.Desc, len(counters))}
	for i := range counters {
		if m := &counters[i]; m.Metric != "" {
			c.descs[i] = prometheus.NewDesc(m.Metric, m.Help, fromLabels[m.from], nil)
		}
	}
	for _, m := range distributions {
		c.dists = append(c.dists, prometheus.NewDesc(m.Metric, m.Help, fromLabels[m.from], nil))
	}
	for _, m := range daemonFamilies {
		c.daemon = append(c.daemon, prometheus.NewDesc(m.Metric, m.Help, m.labels, nil))
	}
	return c
}

// Describe sends every descriptor (some are emitted only with --latency,
// --offload or global rules).
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, ds := range [][]*prometheus.Desc{c.descs, c.dists, c.daemon} {
		for _, d := range ds {
			if d != nil {
				ch <- d
			}
		}
	}
}

// scrape is what one scrape reads, each part once.
type scrape struct {
	queues  []queueSample
	qlabels []string
	// snap is the engine's snapshot; elabel its queue label, the queues
	// it serves ("20-23"; "3" for one queue): its counters (the rules',
	// flows, malformed, ...) are the engine's, not any one queue's.
	snap     *snapshot
	elabel   string
	global   map[string]global.RuleStats
	gnames   []string // global rules, sorted
	store    global.Stats
	hasStore bool
	off      *offloadSample
}

func (d *state) scrape() *scrape {
	s := &scrape{queues: make([]queueSample, len(d.sh.ws)), snap: d.sh.snap.Load(), elabel: d.sh.label()}
	for i, w := range d.sh.ws {
		s.queues[i] = d.sample(w)
		s.qlabels = append(s.qlabels, strconv.Itoa(int(w.queue)))
	}
	s.global, s.store, s.hasStore = d.gl.stats()
	s.gnames = sortedStrings(slices.Collect(maps.Keys(s.global)))
	if d.off != nil {
		ost := d.off.Stats()
		kd, _, _ := d.off.KernelDrops()
		s.off = &offloadSample{offloaded: ost.Offloaded, active: ost.Active, kernelDrops: kd, lost: ost.Lost + ost.Full, errors: ost.Errors}
	}
	return s
}

// each calls fn with every source of from, and its label values.
func (s *scrape) each(f from, fn func(*src, ...string)) {
	switch f {
	case fromQueue:
		for i := range s.queues {
			fn(&src{q: &s.queues[i]}, s.qlabels[i])
		}
	case fromEngine:
		fn(&src{e: s.snap}, s.elabel)
	case fromRule:
		for j := range s.snap.rules {
			r := &s.snap.rules[j]
			fn(&src{e: s.snap, r: r}, s.elabel, r.name, r.pathLabel())
		}
	case fromGlobalRule:
		for _, n := range s.gnames {
			g := s.global[n]
			fn(&src{g: &g}, n)
		}
	case fromStore:
		if s.hasStore {
			fn(&src{gs: &s.store})
		}
	case fromTotal:
		for j := range s.snap.totals {
			t := &s.snap.totals[j]
			fn(&src{e: s.snap, t: t}, s.elabel, t.total.Name)
		}
	case fromOffload:
		if s.off != nil {
			fn(&src{off: s.off})
		}
	}
}

// Collect reads the values now.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	s := d.scrape()
	for i := range counters {
		m, desc := &counters[i], c.descs[i]
		if desc == nil {
			continue
		}
		s.each(m.from, func(x *src, labels ...string) {
			ch <- prometheus.MustNewConstMetric(desc, m.Kind.valueType(), m.get(x), labels...)
		})
	}
	for i := range distributions {
		m, desc := &distributions[i], c.dists[i]
		if m.latency && !d.cfg.Queue.Latency {
			continue
		}
		s.each(m.from, func(x *src, labels ...string) {
			h := m.get(x)
			ch <- prometheus.MustNewConstHistogram(desc, h.count, h.sum, h.buckets, labels...)
		})
	}
	ok, failed, last := d.reloadCounts()
	ch <- prometheus.MustNewConstMetric(c.daemon[0], prometheus.CounterValue, float64(ok), "ok")
	ch <- prometheus.MustNewConstMetric(c.daemon[0], prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(c.daemon[1], prometheus.GaugeValue, b2f(last == nil || last.ok))
	ch <- prometheus.MustNewConstMetric(c.daemon[2], prometheus.GaugeValue, float64(d.loadedAt().UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(c.daemon[3], prometheus.GaugeValue, 1, d.cfg.Version, runtime.Version())
	for j := range s.snap.rules {
		r := &s.snap.rules[j]
		cr := describeRule(&r.rule)
		ch <- prometheus.MustNewConstMetric(c.daemon[4], prometheus.GaugeValue, 1,
			s.elabel, r.name, r.pathLabel(), cr.Action, cr.Algorithm, strconv.FormatBool(cr.Shape), cr.RateText())
	}
}

// metricsHandler serves the daemon's metrics, the Go runtime's and the
// process's, the global rules' (lease state, the store's errors), and
// those of cfg.Collectors.
func metricsHandler(d *state) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	cs := []prometheus.Collector{
		newCollector(d),
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
