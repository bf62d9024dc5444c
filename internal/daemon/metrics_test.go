package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/nfq"
)

// fakeQueue stands for an nfq.Queue whose counters the test sets.
type fakeQueue struct {
	mu     sync.Mutex
	stats  nfq.Stats
	kernel nfq.KernelStats
	hist   nfq.LatencyHistogram
	late   nfq.LatencyHistogram
	hold   nfq.HoldStats
	wakes  int
}

func (q *fakeQueue) Run(context.Context, nfq.Handler) error { return nil }
func (q *fakeQueue) Close() error                           { return nil }
func (q *fakeQueue) PortID() uint32                         { return 77 }
func (q *fakeQueue) Latency() nfq.LatencyStats              { return nfq.LatencyStats{} }
func (q *fakeQueue) Stats() nfq.Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}
func (q *fakeQueue) KernelStats() (nfq.KernelStats, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.kernel, nil
}
func (q *fakeQueue) LatencyHistogram(b []time.Duration) nfq.LatencyHistogram {
	return q.histogram(&q.hist, b)
}
func (q *fakeQueue) LateHistogram(b []time.Duration) nfq.LatencyHistogram {
	return q.histogram(&q.late, b)
}

// histogram is *h, with empty buckets of b where it has none.
func (q *fakeQueue) histogram(h *nfq.LatencyHistogram, b []time.Duration) nfq.LatencyHistogram {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := *h
	if out.Cumulative == nil {
		out.Cumulative = make([]uint64, len(b))
	}
	return out
}
func (q *fakeQueue) HoldRoom() int { return 0 }
func (q *fakeQueue) HoldStats() nfq.HoldStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hold
}
func (q *fakeQueue) Wake() {
	q.mu.Lock()
	q.wakes++
	q.mu.Unlock()
}

type fakeMonitor map[uint16]failopen.FailOpenStats

func (m fakeMonitor) Stats(q uint16) failopen.FailOpenStats { return m[q] }
func (m fakeMonitor) Total() failopen.FailOpenStats         { return failopen.FailOpenStats{} }

// testPolicy is two limit rules, by source port: "a" (sport 1000, burst 2)
// and "b" (sport 1001, burst 3), and "rest" accepting the others.
var testPolicy = rule("a", udpSport(1000), "pps = 0.001", "burst = 2") +
	rule("b", udpSport(1001), "pps = 0.001", "burst = 3") + acceptRest

// decidedEngine is the engine of the policy text serving queues 3, 4, ...
// (one per element of sports) over fake queues: queue 3+i, in turn, has
// decided at now a batch of a UDP packet from each port of sports[i], its
// fake queue counting the verdicts; the snapshot is published.
func decidedEngine(t *testing.T, text string, now int64, sports ...[]uint16) (*shared, []*fakeQueue) {
	t.Helper()
	var queues []uint16
	for i := range sports {
		queues = append(queues, uint16(3+i))
	}
	sh, fqs := newTestEngine(t, text, queues...)
	for i, w := range sh.ws {
		var batch []nfq.Packet
		for _, sp := range sports[i] {
			d := udp4(sp)
			batch = append(batch, nfq.Packet{Data: d, Len: len(d)})
		}
		v := make([]nfq.Verdict, len(batch))
		w.decide(batch, v, now)
		st := &fqs[i].stats
		for _, x := range v {
			st.Packets++
			if x.Action == nfq.Drop {
				st.Dropped++
			} else {
				st.Accepted++
			}
		}
		st.Batches = 1
	}
	sh.snapshot(now)
	return sh, fqs
}

// testState is a daemon state of one engine over fake queues 3 and 4,
// whose workers have decided: queue 3, 5 packets of a's flow and 1 of b's;
// queue 4, 4 of b's (the same flow: b's burst of 3 is spent by its second)
// and 2 others.
func testState(t *testing.T) (*state, []*fakeQueue) {
	t.Helper()
	cfg := &Config{Queue: nfq.Config{MaxQueueLen: 100}, Version: "v1.2.3"}
	sh, fqs := decidedEngine(t, testPolicy, int64(1e18), []uint16{1000, 1000, 1000, 1000, 1000, 1001}, []uint16{1001, 1001, 1001, 1001, 1002, 1003})
	for i, fq := range fqs {
		fq.stats.VerdictMsgs = 2
		fq.kernel = nfq.KernelStats{PortID: 77, QueueTotal: uint64(10 * i), QueueDropped: 5, UserDropped: 6}
	}
	mon := fakeMonitor{3: {Passed: 1234567, Secs: 2.5, Exact: true}, 4: {Active: true}}
	start := time.Unix(1_700_000_000, 0)
	return &state{cfg: cfg, sh: sh, mon: mon, policy: "p.toml", start: start, loaded: start}, fqs
}

func TestCollector(t *testing.T) {
	d, fqs := testState(t)
	c := newCollector(d)
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	want := `
# HELP packetshaper_packets_total Packets decided.
# TYPE packetshaper_packets_total counter
packetshaper_packets_total{queue="3"} 6
packetshaper_packets_total{queue="4"} 6
# HELP packetshaper_dropped_total Packets dropped.
# TYPE packetshaper_dropped_total counter
packetshaper_dropped_total{queue="3"} 3
packetshaper_dropped_total{queue="4"} 2
# HELP packetshaper_unmatched_total Packets no rule matched (accepted).
# TYPE packetshaper_unmatched_total counter
packetshaper_unmatched_total{queue="3-4"} 0
# HELP packetshaper_flows Flows in the flow tables (with --fastpath, the kernel's flow maps' too).
# TYPE packetshaper_flows gauge
packetshaper_flows{queue="3-4"} 2
# HELP packetshaper_queue_packets Packets the kernel holds in the queue waiting for a verdict (queued).
# TYPE packetshaper_queue_packets gauge
packetshaper_queue_packets{queue="3"} 0
packetshaper_queue_packets{queue="4"} 10
# HELP packetshaper_queue_bound 1 if the kernel lists the queue as bound to packetshaper's socket.
# TYPE packetshaper_queue_bound gauge
packetshaper_queue_bound{queue="3"} 1
packetshaper_queue_bound{queue="4"} 1
# HELP packetshaper_socket_drops_total Packets the kernel could not send to the socket (socket_drops).
# TYPE packetshaper_socket_drops_total counter
packetshaper_socket_drops_total{queue="3"} 6
packetshaper_socket_drops_total{queue="4"} 6
# HELP packetshaper_failopen_passed_total Packets the kernel let through without a verdict (fail-open): the queue was full, or the socket's receive buffer was (lost).
# TYPE packetshaper_failopen_passed_total counter
packetshaper_failopen_passed_total{queue="3"} 1.234567e+06
packetshaper_failopen_passed_total{queue="4"} 0
# HELP packetshaper_failopen_active 1 while the queue is full.
# TYPE packetshaper_failopen_active gauge
packetshaper_failopen_active{queue="3"} 0
packetshaper_failopen_active{queue="4"} 1
# HELP packetshaper_rule_dropped_total Packets a rule dropped.
# TYPE packetshaper_rule_dropped_total counter
packetshaper_rule_dropped_total{path="queue",queue="3-4",rule="a"} 3
packetshaper_rule_dropped_total{path="queue",queue="3-4",rule="b"} 2
packetshaper_rule_dropped_total{path="queue",queue="3-4",rule="rest"} 0
# HELP packetshaper_rule_packets_total Packets a rule decided.
# TYPE packetshaper_rule_packets_total counter
packetshaper_rule_packets_total{path="queue",queue="3-4",rule="a"} 5
packetshaper_rule_packets_total{path="queue",queue="3-4",rule="b"} 5
packetshaper_rule_packets_total{path="queue",queue="3-4",rule="rest"} 2
# HELP packetshaper_reloads_total Policy reloads (SIGHUP), by result: ok, or failed (the previous policy kept).
# TYPE packetshaper_reloads_total counter
packetshaper_reloads_total{result="failed"} 0
packetshaper_reloads_total{result="ok"} 0
# HELP packetshaper_build_info Always 1: the version of packetshaper and the Go it was built with.
# TYPE packetshaper_build_info gauge
packetshaper_build_info{goversion="` + goVersion() + `",version="v1.2.3"} 1
`
	names := []string{"packetshaper_packets_total", "packetshaper_dropped_total", "packetshaper_unmatched_total", "packetshaper_flows",
		"packetshaper_queue_packets", "packetshaper_queue_bound", "packetshaper_socket_drops_total", "packetshaper_failopen_passed_total",
		"packetshaper_failopen_active", "packetshaper_rule_dropped_total", "packetshaper_rule_packets_total", "packetshaper_reloads_total",
		"packetshaper_build_info"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Without --latency and --offload, neither family.
	if n := testutil.CollectAndCount(c, "packetshaper_verdict_latency_seconds", "packetshaper_offloaded_total"); n != 0 {
		t.Errorf("%d latency or offload series without --latency or --offload", n)
	}

	// Values are read at each scrape: new counters, a reload, the
	// latency histogram, a queue no longer bound.
	fqs[0].mu.Lock()
	fqs[0].stats.Packets = 1 << 40
	fqs[0].kernel.PortID = 5 // another socket's
	fqs[0].mu.Unlock()
	d.reloaded(reloadRecord{at: time.Unix(1_700_000_100, 0), ok: true})
	d.reloaded(reloadRecord{at: time.Unix(1_700_000_200, 0), err: "bad"})
	d.cfg.Queue.Latency = true
	fqs[1].hist = nfq.LatencyHistogram{Count: 3, Sum: 1500 * time.Microsecond, Cumulative: make([]uint64, len(latencyBounds))}
	for i, b := range latencyBounds {
		if b >= time.Millisecond {
			fqs[1].hist.Cumulative[i] = 3
		} else if b >= 100*time.Microsecond {
			fqs[1].hist.Cumulative[i] = 1
		}
	}
	want = `
# HELP packetshaper_packets_total Packets decided.
# TYPE packetshaper_packets_total counter
packetshaper_packets_total{queue="3"} 1.099511627776e+12
packetshaper_packets_total{queue="4"} 6
# HELP packetshaper_queue_bound 1 if the kernel lists the queue as bound to packetshaper's socket.
# TYPE packetshaper_queue_bound gauge
packetshaper_queue_bound{queue="3"} 0
packetshaper_queue_bound{queue="4"} 1
# HELP packetshaper_reloads_total Policy reloads (SIGHUP), by result: ok, or failed (the previous policy kept).
# TYPE packetshaper_reloads_total counter
packetshaper_reloads_total{result="failed"} 1
packetshaper_reloads_total{result="ok"} 1
# HELP packetshaper_last_reload_successful 1 unless the last reload failed.
# TYPE packetshaper_last_reload_successful gauge
packetshaper_last_reload_successful 0
# HELP packetshaper_last_reload_success_timestamp_seconds When the policy in force was loaded (start or last successful reload).
# TYPE packetshaper_last_reload_success_timestamp_seconds gauge
packetshaper_last_reload_success_timestamp_seconds 1.7000001e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "packetshaper_packets_total", "packetshaper_queue_bound",
		"packetshaper_reloads_total", "packetshaper_last_reload_successful", "packetshaper_last_reload_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	hist := wantHistograms("packetshaper_verdict_latency_seconds", "Time from a packet entering the network stack to its verdict (with --latency; kept to 1 µs below 1 ms, to 1/16 above).",
		latencyBounds, map[string]nfq.LatencyHistogram{"3": {Cumulative: make([]uint64, len(latencyBounds))}, "4": fqs[1].hist})
	if err := testutil.CollectAndCompare(c, strings.NewReader(hist), "packetshaper_verdict_latency_seconds"); err != nil {
		t.Error(err)
	}
}

// TestMetricsHandler: the registry takes the daemon's collector beside the
// Go and process collectors and extra ones, and serves them all.
func TestMetricsHandler(t *testing.T) {
	d, _ := testState(t)
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "packetshaper_global_test_total", Help: "A test."})
	extra.Add(3)
	d.cfg.Collectors = []prometheus.Collector{extra}
	h, err := metricsHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptestServer(t, h)
	b := httpBody(t, srv+"/metrics")
	for _, want := range []string{
		`packetshaper_packets_total{queue="3"} 6`, "go_goroutines ", "process_resident_memory_bytes ",
		"packetshaper_global_test_total 3", `packetshaper_build_info{goversion="`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestStatus: the control socket's status from the same state as the
// metrics: queues, each with its own counters and the first with the
// engine's, rules with their settings and the engine's counters (of every
// queue), reloads.
func TestStatus(t *testing.T) {
	d, _ := testState(t)
	d.reloaded(reloadRecord{at: time.Unix(1_700_000_100, 0), ok: true, kept: []string{"a"}})
	st := d.Status()
	if st.Version != "v1.2.3" || st.Policy != "p.toml" || st.Mode != "fail-open" || st.Offload || !st.Started.Equal(d.start) || st.UptimeSecs <= 0 {
		t.Errorf("status header: %+v", st)
	}
	if st.Reloads.OK != 1 || st.Reloads.Failed != 0 || st.Reloads.Last == nil || !st.Reloads.Last.OK || len(st.Reloads.Last.KeptState) != 1 {
		t.Errorf("reloads: %+v", st.Reloads)
	}
	if len(st.Queues) != 2 {
		t.Fatalf("queues: %+v", st.Queues)
	}
	q3, q4 := st.Queues[0], st.Queues[1]
	if q3.Queue != 3 || !q3.Bound || q3.Packets != 6 || q3.Dropped != 3 || q3.FailOpenPassed != 1234567 || !q3.FailOpenExact || q3.Flows != 2 || q3.MaxLen != 100 {
		t.Errorf("queue 3: %+v", q3)
	}
	if q4.Queue != 4 || q4.Packets != 6 || q4.Dropped != 2 || q4.Queued != 10 || q4.Fill != 0.1 || !q4.FailOpenActive || q4.QueueDrops != 5 || q4.SocketDrops != 6 {
		t.Errorf("queue 4: %+v", q4)
	}
	if q4.Flows != 0 || q4.Unmatched != 0 || q4.Malformed != 0 {
		t.Errorf("queue 4 shows the engine's counters (%+v): they belong on its first queue only", q4)
	}
	if len(st.Rules) != 3 {
		t.Fatalf("rules: %+v", st.Rules)
	}
	a, b, rest := st.Rules[0], st.Rules[1], st.Rules[2]
	// Flow timeout: the default raised to what the bucket remembers,
	// burst 2 / 0.001 per second.
	if a.Name != "a" || a.Action != "limit" || a.Algorithm != "token-bucket" || a.Rate != 0.001 || a.Burst != 2 || a.Unit != "packets" ||
		a.Key != "5tuple" || a.MaxFlows != 65536 || a.FlowTimeoutSecs != 2000 || a.Packets != 5 || a.Dropped != 3 || a.Flows != 1 {
		t.Errorf("rule a: %+v", a)
	}
	if b.Name != "b" || b.Packets != 5 || b.Accepted != 3 || b.Dropped != 2 || b.Flows != 1 {
		t.Errorf("rule b (one flow, one bucket over both queues): %+v", b)
	}
	if rest.Name != "rest" || rest.Action != "accept" || rest.Algorithm != "" || rest.Packets != 2 || rest.Accepted != 2 {
		t.Errorf("rule rest: %+v", rest)
	}
}

// wantHistograms is the exposition of histogram name (help) with buckets
// of bounds, one by queue label: hs's.
func wantHistograms(name, help string, bounds []time.Duration, hs map[string]nfq.LatencyHistogram) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for q, h := range hs {
		for i, le := range bounds {
			fmt.Fprintf(&b, "%s_bucket{queue=%q,le=\"%g\"} %d\n", name, q, le.Seconds(), h.Cumulative[i])
		}
		fmt.Fprintf(&b, "%s_bucket{queue=%q,le=\"+Inf\"} %d\n", name, q, h.Count)
		fmt.Fprintf(&b, "%s_sum{queue=%q} %g\n", name, q, h.Sum.Seconds())
		fmt.Fprintf(&b, "%s_count{queue=%q} %d\n", name, q, h.Count)
	}
	return b.String()
}
