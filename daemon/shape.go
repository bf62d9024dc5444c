package daemon

import (
	"fmt"
	"io"
	"time"

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
		sn := w.snap.Load()
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

// writeShapeMetrics writes shaping's metrics in the Prometheus text format,
// labelled by queue (and rule).
func writeShapeMetrics(w io.Writer, ws []*worker) {
	sec := func(ns int64) string { return fmt.Sprintf("%g", float64(ns)/1e9) }
	type qm struct {
		name, typ, help string
		get             func(*worker, nfq.HoldStats, *snapshot) string
	}
	for _, m := range []qm{
		{"packetshaper_held", "gauge", "Packets held in the kernel's queue for a later verdict (shaping).", func(_ *worker, h nfq.HoldStats, _ *snapshot) string { return fmt.Sprint(h.Held) }},
		{"packetshaper_held_peak", "gauge", "The most packets held at once since start.", func(_ *worker, h nfq.HoldStats, _ *snapshot) string { return fmt.Sprint(h.Peak) }},
		{"packetshaper_held_max", "gauge", "The most packets the queue may hold at once (--max-held).", func(_ *worker, h nfq.HoldStats, _ *snapshot) string { return fmt.Sprint(h.MaxHeld) }},
		{"packetshaper_delayed_total", "counter", "Packets shaping rules accepted later than they arrived.", func(_ *worker, _ nfq.HoldStats, s *snapshot) string { return fmt.Sprint(s.Delayed) }},
		{"packetshaper_shape_overflow_total", "counter", "Packets shaping rules dropped: their queue was full (max-delay) or --max-held packets were held.", func(_ *worker, _ nfq.HoldStats, s *snapshot) string { return fmt.Sprint(s.ShapeOverflow) }},
		{"packetshaper_shape_delay_max_seconds", "gauge", "The longest delay a shaping rule gave a packet.", func(_ *worker, _ nfq.HoldStats, s *snapshot) string { return sec(s.delays.Max) }},
		{"packetshaper_release_late_max_seconds", "gauge", "The latest a held packet got its verdict after its departure time.", func(_ *worker, h nfq.HoldStats, _ *snapshot) string { return sec(int64(h.Late.Max)) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, wk := range ws {
			fmt.Fprintf(w, "%s{queue=\"%d\"} %s\n", m.name, wk.queue, m.get(wk, wk.q.HoldStats(), wk.snap.Load()))
		}
	}
	// Summaries: quantiles from the histograms (bucket bounds).
	fmt.Fprintf(w, "# HELP packetshaper_shape_delay_seconds Delays shaping rules gave packets (from arrival to departure time).\n# TYPE packetshaper_shape_delay_seconds summary\n")
	for _, wk := range ws {
		d := wk.snap.Load().delays
		fmt.Fprintf(w, "packetshaper_shape_delay_seconds{queue=\"%d\",quantile=\"0.5\"} %s\n", wk.queue, sec(d.P50))
		fmt.Fprintf(w, "packetshaper_shape_delay_seconds{queue=\"%d\",quantile=\"0.99\"} %s\n", wk.queue, sec(d.P99))
		fmt.Fprintf(w, "packetshaper_shape_delay_seconds_sum{queue=\"%d\"} %s\n", wk.queue, sec(d.Sum))
		fmt.Fprintf(w, "packetshaper_shape_delay_seconds_count{queue=\"%d\"} %d\n", wk.queue, d.Count)
	}
	fmt.Fprintf(w, "# HELP packetshaper_release_late_seconds How late held packets got their verdicts after their departure time.\n# TYPE packetshaper_release_late_seconds summary\n")
	for _, wk := range ws {
		l := wk.q.HoldStats().Late
		fmt.Fprintf(w, "packetshaper_release_late_seconds{queue=\"%d\",quantile=\"0.5\"} %g\n", wk.queue, l.P50.Seconds())
		fmt.Fprintf(w, "packetshaper_release_late_seconds{queue=\"%d\",quantile=\"0.99\"} %g\n", wk.queue, l.P99.Seconds())
		fmt.Fprintf(w, "packetshaper_release_late_seconds_sum{queue=\"%d\"} %g\n", wk.queue, time.Duration(l.Sum).Seconds())
		fmt.Fprintf(w, "packetshaper_release_late_seconds_count{queue=\"%d\"} %d\n", wk.queue, l.Count)
	}
	for _, m := range []struct {
		name, help string
		get        func(*ruleSnap) uint64
	}{
		{"packetshaper_rule_delayed_total", "Packets a shaping rule accepted later than they arrived.", func(r *ruleSnap) uint64 { return r.Delayed }},
		{"packetshaper_rule_shape_overflow_total", "Packets a shaping rule dropped because its queue was full.", func(r *ruleSnap) uint64 { return r.ShapeOverflow }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
		for _, wk := range ws {
			sn := wk.snap.Load()
			for i := range sn.rules {
				fmt.Fprintf(w, "%s{queue=\"%d\",rule=%q} %d\n", m.name, wk.queue, sn.rules[i].name, m.get(&sn.rules[i]))
			}
		}
	}
}
