package nfq

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pacedSend sends n datagrams numbered from first at rate per second,
// evenly, from the calling goroutine (whose thread is in the namespace).
func pacedSend(t testing.TB, p *udpPair, first, n int, rate float64) {
	t.Helper()
	start := time.Now()
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(float64(i) / rate * 1e9))
		if d := time.Until(due); d > time.Millisecond {
			time.Sleep(d)
		}
		p.send(t, uint16(first+i), 16)
	}
}

// startMonitor starts m.Run until the test ends.
func startMonitor(t testing.TB, m *Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
}

// TestMonitorFailOpen: a steady stream, and a Handler that blocks for a
// second: the queue fills and the kernel passes the rest without a verdict.
// One monitor counts them from the rule's counter (exact), one estimates
// them; both log the start and the end. The truth is what arrived minus
// what the Handler saw.
func TestMonitorFailOpen(t *testing.T) {
	const (
		queue   = 5
		maxLen  = 64
		rate    = 5000.0 // packets/s
		n       = 10000  // 2 s
		blockAt = 2500   // after 0.5 s
		block   = time.Second
	)
	newNetns(t, queue)
	p := newUDPPair(t)
	q := openQueue(t, Config{Queue: queue, MaxQueueLen: maxLen})
	var logExact, logEst syncBuffer
	mExact, err := NewMonitor([]*Queue{q}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&logExact, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mEst, err := NewMonitor([]*Queue{q}, MonitorConfig{EstimateOnly: true, Logger: slog.New(slog.NewTextHandler(&logEst, nil))})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, mExact)
	startMonitor(t, mEst)
	var blocked atomic.Bool
	stop := runQueue(t, q, func(b []Packet, v []Verdict, now int64) {
		for i := range b {
			if seq, ok := seqOf(&b[i]); ok && seq >= blockAt && !blocked.Swap(true) {
				time.Sleep(block)
			}
		}
	})
	pacedSend(t, p, 0, n, rate)
	got := p.settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond) // a sample with the queue drained
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	s := q.Stats()
	if got != n {
		t.Errorf("received %d of %d", got, n)
	}
	truth := uint64(got) - s.Packets - s.Lost
	if truth < 3000 {
		t.Fatalf("only %d packets passed without a verdict; the test needs the queue to overflow", truth)
	}
	ex, es := mExact.Stats(queue), mEst.Stats(queue)
	t.Logf("truth %d (received %d, answered %d, lost %d); exact %+v; estimate %+v (%+.1f%%)",
		truth, got, s.Packets, s.Lost, ex, es, 100*(float64(es.Passed)/float64(truth)-1))
	if ex.Passed != truth || !ex.Exact || ex.Active {
		t.Errorf("exact monitor: %+v, want Passed %d, Exact, not Active", ex, truth)
	}
	if ex.Secs < 0.8*block.Seconds() || ex.Secs > 1.3*block.Seconds() {
		t.Errorf("exact monitor: Secs = %.3f, want about %v", ex.Secs, block.Seconds())
	}
	if tot := mExact.Total(); tot != ex {
		t.Errorf("Total() = %+v, want %+v (one queue)", tot, ex)
	}
	if es.Exact || math.Abs(float64(es.Passed)/float64(truth)-1) > 0.10 {
		t.Errorf("estimating monitor: %+v, want not Exact and Passed within 10%% of %d", es, truth)
	}
	for name, l := range map[string]string{"exact": logExact.String(), "estimate": logEst.String()} {
		t.Logf("%s log:\n%s", name, l)
		if c := strings.Count(l, "full: packets pass without a verdict (fail-open)"); c != 1 {
			t.Errorf("%s log: %d start lines, want 1", name, c)
		}
		if c := strings.Count(l, "fail-open ended"); c != 1 {
			t.Errorf("%s log: %d end lines, want 1", name, c)
		}
	}
	if !strings.Contains(logExact.String(), "exact, from the rule counters") || !strings.Contains(logEst.String(), "estimated from the arrival rate") {
		t.Error("the logs do not say how the counts were made")
	}
}
