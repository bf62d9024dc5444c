package daemon

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/offload"
)

// totals sums the counters of all queues.
type totals struct {
	nfq.Stats
	engine  snapshot        // engine counters summed over the engines; rules by name
	kernel  nfq.KernelStats // summed over the bound queues
	latency nfq.LatencyStats
}

func sum(ws []*worker) totals {
	var t totals
	byName := map[string]int{}
	for _, w := range ws {
		s := w.q.Stats()
		t.Packets += s.Packets
		t.Accepted += s.Accepted
		t.Dropped += s.Dropped
		t.Batches += s.Batches
		t.VerdictMsgs += s.VerdictMsgs
		t.ENOBUFS += s.ENOBUFS
		t.Lost += s.Lost
		t.StopAccepted += s.StopAccepted
		t.Errors += s.Errors
		// Quantiles do not add up over queues: report the worst queue's.
		if l := w.q.Latency(); l.P99 > t.latency.P99 || l.Max > t.latency.Max {
			c := t.latency.Count + l.Count
			t.latency = l
			t.latency.Count = c
		} else {
			t.latency.Count += l.Count
		}
		if ks, err := w.q.KernelStats(); err == nil {
			t.kernel.QueueTotal += ks.QueueTotal
			t.kernel.QueueDropped += ks.QueueDropped
			t.kernel.UserDropped += ks.UserDropped
		}
	}
	// The engines' counters, each engine once (it serves several queues).
	for _, sh := range engines(ws) {
		sn := sh.snap.Load()
		e := &t.engine
		e.Malformed += sn.Malformed
		e.NoPorts += sn.NoPorts
		e.Unmatched += sn.Unmatched
		e.Flows += sn.Flows
		e.Evictions += sn.Evictions
		e.Expired += sn.Expired
		e.Offloads += sn.Offloads
		for _, r := range sn.rules {
			i, ok := byName[r.name]
			if !ok {
				i = len(e.rules)
				byName[r.name] = i
				e.rules = append(e.rules, ruleSnap{name: r.name})
			}
			a := &e.rules[i]
			a.Packets += r.Packets
			a.Accepted += r.Accepted
			a.Dropped += r.Dropped
			a.ShadowDropped += r.ShadowDropped
			a.Marked += r.Marked
			a.Delayed += r.Delayed
			a.ShapeOverflow += r.ShapeOverflow
			a.Flows += r.Flows
			a.Evictions += r.Evictions
			a.Expired += r.Expired
			a.Fallback += r.Fallback
		}
	}
	return t
}

func logStats(log *slog.Logger, msg string, ws []*worker, mon failOpen, off *offload.Offloader, gl *globals, elapsed time.Duration, latency bool) {
	t := sum(ws)
	attrs := []any{
		"packets", t.Packets, "accepted", t.Accepted, "dropped", t.Dropped,
		"malformed", t.engine.Malformed, "no_ports", t.engine.NoPorts, "unmatched", t.engine.Unmatched,
		"flows", t.engine.Flows, "evictions", t.engine.Evictions, "expired", t.engine.Expired,
		"queued", t.kernel.QueueTotal, "queue_drops", t.kernel.QueueDropped,
		"socket_drops", t.kernel.UserDropped, "lost", t.Lost, "enobufs", t.ENOBUFS, "stop_accepted", t.StopAccepted,
		"errors", t.Errors, "batches", t.Batches, "verdict_msgs", t.VerdictMsgs,
		"secs", fmt.Sprintf("%.3f", elapsed.Seconds()),
	}
	fo := mon.Total()
	if !failClosed(ws) {
		// Fail-open accepts also what the kernel could not deliver to
		// a full socket (lost).
		fo.Passed += t.Lost
	}
	attrs = append(attrs, "failopen_secs", fmt.Sprintf("%.3f", fo.Secs), "failopen_passed", fo.Passed, "failopen_exact", fo.Exact)
	if off != nil {
		ost := off.Stats()
		kd, _, _ := off.KernelDrops()
		attrs = append(attrs, "offloaded", ost.Offloaded, "offload_active", ost.Active, "offload_kernel_drops", kd,
			"offload_lost", ost.Lost+ost.Full, "offload_errors", ost.Errors)
	}
	if len(ws) > 1 {
		var b strings.Builder
		for i, w := range ws {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d:%d", w.queue, w.q.Stats().Packets)
		}
		attrs = append(attrs, "per_queue", b.String())
	}
	attrs = append(attrs, shapeAttrs(sumShape(ws))...)
	if latency {
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e3) }
		attrs = append(attrs, "lat_count", t.latency.Count, "lat_p50_us", us(t.latency.P50),
			"lat_p99_us", us(t.latency.P99), "lat_max_us", us(t.latency.Max))
	}
	// One group per rule: rule.NAME.packets=… in text, nested in JSON.
	gs, cs, hasGlobal := gl.stats()
	if hasGlobal {
		attrs = append(attrs, "redis_commands", cs.Commands, "redis_errors", cs.Errors)
	}
	var rules []any
	for _, r := range t.engine.rules {
		fields := []any{"packets", r.Packets, "accepted", r.Accepted, "dropped", r.Dropped,
			"shadow_dropped", r.ShadowDropped, "marked", r.Marked, "flows", r.Flows, "evictions", r.Evictions}
		if g, ok := gs[r.name]; ok {
			mode := "leases"
			if g.Fallback {
				mode = "fallback"
			}
			fields = append(fields, "global_mode", mode, "global_keys", g.Keys, "global_asks", g.Asks,
				"global_granted", g.Granted, "redis_errors", g.Errors, "global_share", fmt.Sprintf("%.3f", g.Share),
				"global_hosts", g.Hosts, "fallback_packets", r.Fallback)
			if g.Fallback {
				fields = append(fields, "fallback_rate", fmt.Sprintf("%.4g", g.FallbackRate))
			}
		}
		fields = append(fields, shapeRuleAttrs(&r)...)
		rules = append(rules, slog.Group(r.name, fields...))
	}
	attrs = append(attrs, slog.Group("rule", rules...))
	log.Info(msg, attrs...)
}

// failClosed reports whether the queues drop what does not fit.
func failClosed(ws []*worker) bool { return len(ws) > 0 && ws[0].failClosed }
