package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/global"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/offload"
)

// totals sums the counters of all queues.
type totals struct {
	nfq.Stats
	engine  snapshot        // engine counters summed over the queues; rules by name
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
		t.Errors += s.Errors
		sn := w.snap.Load()
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
			a.Flows += r.Flows
			a.Evictions += r.Evictions
			a.Expired += r.Expired
			a.Fallback += r.Fallback
		}
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
	return t
}

func logStats(log *slog.Logger, msg string, ws []*worker, mon *nfq.Monitor, off *offload.Offloader, gl *globals, elapsed time.Duration, latency bool) {
	t := sum(ws)
	attrs := []any{
		"packets", t.Packets, "accepted", t.Accepted, "dropped", t.Dropped,
		"malformed", t.engine.Malformed, "no_ports", t.engine.NoPorts, "unmatched", t.engine.Unmatched,
		"flows", t.engine.Flows, "evictions", t.engine.Evictions, "expired", t.engine.Expired,
		"queued", t.kernel.QueueTotal, "queue_drops", t.kernel.QueueDropped,
		"socket_drops", t.kernel.UserDropped, "lost", t.Lost, "enobufs", t.ENOBUFS,
		"errors", t.Errors, "batches", t.Batches, "verdict_msgs", t.VerdictMsgs,
		"secs", fmt.Sprintf("%.3f", elapsed.Seconds()),
	}
	fo := mon.Total()
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
		rules = append(rules, slog.Group(r.name, fields...))
	}
	attrs = append(attrs, slog.Group("rule", rules...))
	log.Info(msg, attrs...)
}

// writeMetrics writes the counters in the Prometheus text format.
func writeMetrics(w io.Writer, ws []*worker, mon *nfq.Monitor, off *offload.Offloader, gl *globals) {
	type metric struct {
		name, typ, help string
		get             func(*worker, nfq.Stats, *snapshot) uint64
	}
	for _, m := range []metric{
		{"packetshaper_packets_total", "counter", "Packets decided.", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.Packets }},
		{"packetshaper_accepted_total", "counter", "Packets accepted.", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.Accepted }},
		{"packetshaper_dropped_total", "counter", "Packets dropped.", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.Dropped }},
		{"packetshaper_malformed_total", "counter", "Packets whose IP header is invalid.", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.Malformed }},
		{"packetshaper_no_ports_total", "counter", "Packets whose ports could not be read, limited by address and protocol.", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.NoPorts }},
		{"packetshaper_unmatched_total", "counter", "Packets no rule matched (accepted).", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.Unmatched }},
		{"packetshaper_flows", "gauge", "Flows in the flow tables.", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.Flows }},
		{"packetshaper_flow_evictions_total", "counter", "Flows evicted from a full table.", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.Evictions }},
		{"packetshaper_offload_reports_total", "counter", "Flows reported for offload by the engine.", func(_ *worker, _ nfq.Stats, e *snapshot) uint64 { return e.Offloads }},
		{"packetshaper_lost_total", "counter", "Packets queued by the kernel that never reached packetshaper (socket buffer full).", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.Lost }},
		{"packetshaper_enobufs_total", "counter", "Socket receive buffer overruns.", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.ENOBUFS }},
		{"packetshaper_errors_total", "counter", "Receive and verdict errors.", func(_ *worker, s nfq.Stats, _ *snapshot) uint64 { return s.Errors }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, wk := range ws {
			fmt.Fprintf(w, "%s{queue=\"%d\"} %d\n", m.name, wk.queue, m.get(wk, wk.q.Stats(), wk.snap.Load()))
		}
	}
	for _, m := range []struct {
		name, typ, help string
		get             func(nfq.FailOpenStats) string
	}{
		{"packetshaper_failopen_passed_total", "counter", "Packets the kernel let through without a verdict because the queue was full (fail-open).", func(f nfq.FailOpenStats) string { return fmt.Sprint(f.Passed) }},
		{"packetshaper_failopen_seconds_total", "counter", "Time the queue was full, to within 0.1 s.", func(f nfq.FailOpenStats) string { return fmt.Sprintf("%.3f", f.Secs) }},
		{"packetshaper_failopen_exact", "gauge", "1 if failopen_passed is exact (from the queueing rules' counters), 0 if estimated from the arrival rate.", func(f nfq.FailOpenStats) string { return boolMetric(f.Exact) }},
		{"packetshaper_failopen_active", "gauge", "1 while the queue is full.", func(f nfq.FailOpenStats) string { return boolMetric(f.Active) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, wk := range ws {
			fmt.Fprintf(w, "%s{queue=\"%d\"} %s\n", m.name, wk.queue, m.get(mon.Stats(wk.queue)))
		}
	}
	if off != nil {
		ost := off.Stats()
		kd, _, _ := off.KernelDrops()
		for _, m := range []struct {
			name, typ, help string
			v               uint64
		}{
			{"packetshaper_offloaded_total", "counter", "Flows put in the kernel offload sets.", ost.Offloaded},
			{"packetshaper_offload_active", "gauge", "Offloaded flows not yet expired.", ost.Active},
			{"packetshaper_offload_kernel_drops_total", "counter", "Packets the kernel offload rules dropped (all processes using the table).", kd},
			{"packetshaper_offload_errors_total", "counter", "Failed offload requests.", ost.Errors},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, m.typ, m.name, m.v)
		}
	}
	type ruleMetric struct {
		name, typ, help string
		get             func(*ruleSnap) uint64
	}
	for _, m := range []ruleMetric{
		{"packetshaper_rule_packets_total", "counter", "Packets a rule decided.", func(r *ruleSnap) uint64 { return r.Packets }},
		{"packetshaper_rule_accepted_total", "counter", "Packets a rule accepted.", func(r *ruleSnap) uint64 { return r.Accepted }},
		{"packetshaper_rule_dropped_total", "counter", "Packets a rule dropped.", func(r *ruleSnap) uint64 { return r.Dropped }},
		{"packetshaper_rule_shadow_dropped_total", "counter", "Packets a shadow rule accepted that it would have dropped.", func(r *ruleSnap) uint64 { return r.ShadowDropped }},
		{"packetshaper_rule_marked_total", "counter", "Packets over a rule's limit accepted with a new mark.", func(r *ruleSnap) uint64 { return r.Marked }},
		{"packetshaper_rule_flows", "gauge", "Flows in a rule's table.", func(r *ruleSnap) uint64 { return r.Flows }},
		{"packetshaper_rule_flow_evictions_total", "counter", "Flows evicted from a rule's full table.", func(r *ruleSnap) uint64 { return r.Evictions }},
		{"packetshaper_rule_fallback_packets_total", "counter", "Packets of a global rule decided by its local fallback limit (the store unreachable).", func(r *ruleSnap) uint64 { return r.Fallback }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, wk := range ws {
			sn := wk.snap.Load()
			for i := range sn.rules {
				fmt.Fprintf(w, "%s{queue=\"%d\",rule=%q} %d\n", m.name, wk.queue, sn.rules[i].name, m.get(&sn.rules[i]))
			}
		}
	}
	writeGlobalMetrics(w, gl)
}

func writeGlobalMetrics(w io.Writer, gl *globals) {
	gs, cs, ok := gl.stats()
	if !ok {
		return
	}
	fmt.Fprintf(w, "# HELP packetshaper_redis_commands_total Requests sent to the global rules' store (one per ask, SCRIPT LOAD, PING).\n# TYPE packetshaper_redis_commands_total counter\npacketshaper_redis_commands_total %d\n", cs.Commands)
	fmt.Fprintf(w, "# HELP packetshaper_redis_errors_total Requests to the store that failed or timed out.\n# TYPE packetshaper_redis_errors_total counter\npacketshaper_redis_errors_total %d\n", cs.Errors)
	names := make([]string, 0, len(gs))
	for n := range gs {
		names = append(names, n)
	}
	sortedStrings(names)
	for _, m := range []struct {
		name, typ, help string
		get             func(*global.RuleStats) string
	}{
		{"packetshaper_rule_global_fallback", "gauge", "1 while a global rule limits locally (its store unreachable), 0 on leases.", func(g *global.RuleStats) string { return boolMetric(g.Fallback) }},
		{"packetshaper_rule_global_fallback_rate", "gauge", "A global rule's local limit in fallback (packets or bytes per second), 0 on leases.", func(g *global.RuleStats) string { return fmt.Sprintf("%g", g.FallbackRate) }},
		{"packetshaper_rule_global_keys", "gauge", "Keys of a global rule with a lease on this host.", func(g *global.RuleStats) string { return fmt.Sprint(g.Keys) }},
		{"packetshaper_rule_global_asks_total", "counter", "Lease asks sent to the store (one command each).", func(g *global.RuleStats) string { return fmt.Sprint(g.Asks) }},
		{"packetshaper_rule_global_granted_total", "counter", "Tokens (packets or bytes) the store granted to this host.", func(g *global.RuleStats) string { return fmt.Sprint(g.Granted) }},
		{"packetshaper_rule_redis_errors_total", "counter", "Lease asks that failed or timed out.", func(g *global.RuleStats) string { return fmt.Sprint(g.Errors) }},
		{"packetshaper_rule_global_share", "gauge", "This host's recent share of a global rule's grants.", func(g *global.RuleStats) string { return fmt.Sprintf("%.4f", g.Share) }},
		{"packetshaper_rule_global_hosts", "gauge", "The most hosts seen asking for one key of a global rule.", func(g *global.RuleStats) string { return fmt.Sprint(g.Hosts) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, n := range names {
			g := gs[n]
			fmt.Fprintf(w, "%s{rule=%q} %s\n", m.name, n, m.get(&g))
		}
	}
}

func boolMetric(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
