package daemon

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// Shaping's counters in the stats line and the metrics: what the queues
// hold (nfq.HoldStats) and what the engines delayed and dropped as overflow
// (shaper.Stats, shaper.DelayStats). Kept apart from stats.go so that
// either can change without the other.

// shapeTotals sums shaping's counters over the queues.
type shapeTotals struct {
	held, peak, maxHeld, total, released, full uint64
	delayed, overflow                          uint64
	// Quantiles do not add up over queues: the worst queue's.
	delays shaper.DelayStats
	late   nfq.LatencyStats
}

func sumShape(ws []*worker) shapeTotals {
	var t shapeTotals
	for _, w := range ws {
		h := w.q.HoldStats()
		t.held += h.Held
		t.peak = max(t.peak, h.Peak)
		t.maxHeld += uint64(h.MaxHeld)
		t.total += h.Total
		t.released += h.Released
		t.full += h.Full
		if h.Late.P99 > t.late.P99 || h.Late.Max > t.late.Max {
			c := t.late.Count + h.Late.Count
			t.late = h.Late
			t.late.Count = c
		} else {
			t.late.Count += h.Late.Count
		}
	}
	for _, sh := range engines(ws) {
		sn := sh.snap.Load()
		t.delayed += sn.Delayed
		t.overflow += sn.ShapeOverflow
		d := sn.delays
		if d.P99 > t.delays.P99 || d.Max > t.delays.Max {
			c, s := t.delays.Count+d.Count, t.delays.Sum+d.Sum
			t.delays = d
			t.delays.Count, t.delays.Sum = c, s
		} else {
			t.delays.Count += d.Count
			t.delays.Sum += d.Sum
		}
	}
	return t
}

// shapeAttrs are the stats line's shaping fields: held now (and the bound),
// delayed, shape_overflow, the delays (p50/p99/max) the engines gave, and
// how late the queues gave held packets their verdicts.
func shapeAttrs(t shapeTotals) []any {
	us := func(ns int64) string { return fmt.Sprintf("%.0f", float64(ns)/1e3) }
	return []any{
		"held", t.held, "held_peak", t.peak, "max_held", t.maxHeld, "delayed", t.delayed, "shape_overflow", t.overflow,
		"delay_p50_us", us(t.delays.P50), "delay_p99_us", us(t.delays.P99), "delay_max_us", us(t.delays.Max),
		"late_p50_us", us(int64(t.late.P50)), "late_p99_us", us(int64(t.late.P99)), "late_max_us", us(int64(t.late.Max)),
	}
}

// shapeRuleAttrs are a rule's shaping fields in the stats line.
func shapeRuleAttrs(r *ruleSnap) []any {
	return []any{"delayed", r.Delayed, "shape_overflow", r.ShapeOverflow}
}

// shapeMetrics are shaping's series in the collector: per queue what it
// holds, per engine what it delayed, summaries of the delays given and of
// how late held packets were released, and per rule its delays and
// overflow drops.
type shapeMetrics struct {
	queue      []queueMetric
	engine     []engineMetric
	delay      *prometheus.Desc
	late       *prometheus.Desc
	rule       []ruleMetric
	ruleLabels []string
}

func newShapeMetrics() *shapeMetrics {
	m := &shapeMetrics{}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	q := func(name, help string, typ prometheus.ValueType, get func(*queueSample) float64) {
		m.queue = append(m.queue, queueMetric{newMetric(name, help, typ, "queue"), get})
	}
	q("packetshaper_held", "Packets held in the kernel's queue for a later verdict (shaping).", gauge, func(s *queueSample) float64 { return float64(s.hold.Held) })
	q("packetshaper_held_peak", "The most packets held at once since start.", gauge, func(s *queueSample) float64 { return float64(s.hold.Peak) })
	q("packetshaper_held_max", "The most packets the queue may hold at once (--max-held).", gauge, func(s *queueSample) float64 { return float64(s.hold.MaxHeld) })
	e := func(name, help string, typ prometheus.ValueType, get func(*snapshot) float64) {
		m.engine = append(m.engine, engineMetric{newMetric(name, help, typ, "queue"), get})
	}
	e("packetshaper_delayed_total", "Packets shaping rules accepted later than they arrived.", counter, func(s *snapshot) float64 { return float64(s.Delayed) })
	e("packetshaper_shape_overflow_total", "Packets shaping rules dropped: their queue was full (max-delay) or --max-held packets were held.", counter, func(s *snapshot) float64 { return float64(s.ShapeOverflow) })
	e("packetshaper_shape_delay_max_seconds", "The longest delay a shaping rule gave a packet.", gauge, func(s *snapshot) float64 { return float64(s.delays.Max) / 1e9 })
	q("packetshaper_release_late_max_seconds", "The latest a held packet got its verdict after its departure time.", gauge, func(s *queueSample) float64 { return s.hold.Late.Max.Seconds() })
	m.delay = prometheus.NewDesc("packetshaper_shape_delay_seconds", "Delays shaping rules gave packets (from arrival to departure time).", []string{"queue"}, nil)
	m.late = prometheus.NewDesc("packetshaper_release_late_seconds", "How late held packets got their verdicts after their departure time.", []string{"queue"}, nil)
	r := func(name, help string, get func(*ruleSnap) uint64) {
		m.rule = append(m.rule, ruleMetric{newMetric(name, help, counter, "queue", "rule"), get})
	}
	r("packetshaper_rule_delayed_total", "Packets a shaping rule accepted later than they arrived.", func(r *ruleSnap) uint64 { return r.Delayed })
	r("packetshaper_rule_shape_overflow_total", "Packets a shaping rule dropped because its queue was full.", func(r *ruleSnap) uint64 { return r.ShapeOverflow })
	return m
}

func (m *shapeMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, q := range m.queue {
		ch <- q.desc
	}
	for _, e := range m.engine {
		ch <- e.desc
	}
	ch <- m.delay
	ch <- m.late
	for _, r := range m.rule {
		ch <- r.desc
	}
}

// collect emits the series from the samples the collector took: the
// queues' per queue, the engines' per engine (labelled by the queues it
// serves: engineSample).
func (m *shapeMetrics) collect(ch chan<- prometheus.Metric, ws []*worker, samples []queueSample, engs []engineSample) {
	for _, q := range m.queue {
		for i, w := range ws {
			ch <- prometheus.MustNewConstMetric(q.desc, q.typ, q.get(&samples[i]), strconv.Itoa(int(w.queue)))
		}
	}
	for _, e := range m.engine {
		for _, es := range engs {
			ch <- prometheus.MustNewConstMetric(e.desc, e.typ, e.get(es.snap), es.label)
		}
	}
	for i, w := range ws {
		l := samples[i].hold.Late
		ch <- prometheus.MustNewConstSummary(m.late, l.Count, l.Sum.Seconds(),
			map[float64]float64{0.5: l.P50.Seconds(), 0.99: l.P99.Seconds()}, strconv.Itoa(int(w.queue)))
	}
	for _, es := range engs {
		d := es.snap.delays
		ch <- prometheus.MustNewConstSummary(m.delay, d.Count, float64(d.Sum)/1e9,
			map[float64]float64{0.5: float64(d.P50) / 1e9, 0.99: float64(d.P99) / 1e9}, es.label)
	}
	for _, r := range m.rule {
		for _, es := range engs {
			for j := range es.snap.rules {
				rs := &es.snap.rules[j]
				ch <- prometheus.MustNewConstMetric(r.desc, r.typ, float64(r.get(rs)), es.label, rs.name)
			}
		}
	}
}
