package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/timing"
	"github.com/packetshaper/packetshaper/nfq"
)

// udpFrom returns an IPv4/UDP packet from 10.a.b.c:sport to 10.0.0.2:9000,
// flow i's source being 10.(i>>16).(i>>8).i.
func udpFrom(i int, sport uint16) []byte {
	p := udp4(sport)
	copy(p[12:], []byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	binary.BigEndian.PutUint16(p[24:], 8+16)
	return p
}

// fakeRun is a worker's queue goroutine without a kernel: it decides a
// batch of traffic(n) every period (no traffic if traffic is nil), calls
// idle when woken, and stops the worker at the end (worker.stop).
type fakeRun struct {
	w      *worker
	wakeCh chan struct{}
	stop   chan struct{}
	done   chan struct{}
	now    int64
}

func startFakeRun(w *worker, period time.Duration, traffic func(n int) []nfq.Packet) *fakeRun {
	r := &fakeRun{w: w, wakeCh: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), now: int64(2e18)}
	w.wake = func() {
		select {
		case r.wakeCh <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(r.done)
		defer func() { w.stop(r.now) }()
		t := time.NewTicker(period)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-r.stop:
				return
			case <-r.wakeCh:
				r.now += int64(time.Microsecond)
				w.idle(r.now)
			case <-t.C:
				r.now += int64(period)
				if traffic != nil {
					b := traffic(n)
					w.decide(b, make([]nfq.Verdict, len(b)), r.now)
				} else {
					w.idle(r.now)
				}
			}
		}
	}()
	return r
}

func (r *fakeRun) halt() { close(r.stop); <-r.done }

// loadFlows has w decide one packet from each of n flows, rule a's
// (sport 1000), plus an extra packet for every third flow.
func loadFlows(w *worker, n int) {
	now := int64(2e18)
	var batch []nfq.Packet
	v := make([]nfq.Verdict, 64)
	flush := func() {
		w.decide(batch, v[:len(batch)], now)
		batch = batch[:0]
	}
	for i := range n {
		for range 1 + b2i(i%3 == 0) {
			d := udpFrom(i, 1000)
			batch = append(batch, nfq.Packet{Data: d, Len: len(d)})
			if len(batch) == 64 {
				flush()
			}
		}
	}
	flush()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var listPolicy = rule("a", udpSport(1000), "pps = 0.001", "burst = 1", "max-flows = 200000") +
	rule("b", udpSport(1001), "pps = 10", "burst = 5")

// TestListFlows: a listing while traffic flows (new flows and old ones
// sending) sees every flow held all along once, with its counters; rule b's
// flows are listed too, and alone with a filter.
func TestListFlows(t *testing.T) {
	const n = 20000
	w := newTestWorker(t, listPolicy)
	loadFlows(w, n)
	// Traffic: new flows of rule a (not in the first n), and one flow of
	// rule b.
	r := startFakeRun(w, 50*time.Microsecond, func(i int) []nfq.Packet {
		a, b := udpFrom(n+i, 1000), udpFrom(7, 1001)
		return []nfq.Packet{{Data: a, Len: len(a)}, {Data: b, Len: len(b)}}
	})
	defer r.halt()
	d := &state{cfg: &Config{}, sh: w.shared}
	seen := map[string]control.Flow{}
	t0 := time.Now()
	err := d.Flows(context.Background(), "", func(f *control.Flow) error {
		if _, dup := seen[f.Rule+" "+f.Key]; dup && f.Rule == "a" {
			t.Errorf("flow %s %s listed twice", f.Rule, f.Key)
		}
		seen[f.Rule+" "+f.Key] = *f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %d flows in %v", len(seen), time.Since(t0))
	for i := range n {
		key := fmt.Sprintf("a udp 10.%d.%d.%d:1000 > 10.0.0.2:9000", byte(i>>16), byte(i>>8), byte(i))
		f, ok := seen[key]
		sent := uint64(1 + b2i(i%3 == 0))
		if !ok || f.Packets != sent || f.Accepted != 1 || f.Dropped != sent-1 || f.Unit != "packets" || f.Queue != 0 || f.IdleSecs <= 0 || f.Left > 0.01 {
			t.Fatalf("flow %d: %+v (listed %v), want %d packets, 1 accepted, nothing left", i, f, ok, sent)
		}
	}
	if f, ok := seen["b udp 10.0.0.7:1001 > 10.0.0.2:9000"]; !ok || f.Packets == 0 {
		t.Errorf("rule b's flow: %+v, listed %v", f, ok)
	}

	// Only rule b.
	var got []control.Flow
	if err := d.Flows(context.Background(), "b", func(f *control.Flow) error { got = append(got, *f); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rule != "b" {
		t.Errorf("listing rule b: %+v", got)
	}
	if err := d.Flows(context.Background(), "nosuch", func(*control.Flow) error { return nil }); err == nil {
		t.Error("listing an unknown rule: no error")
	}
}

// TestListFlowsIdle: without traffic, the listing is copied out on the
// queue's wake-ups, chunk after chunk, not at the receive timeout.
func TestListFlowsIdle(t *testing.T) {
	const n = 100000
	w := newTestWorker(t, listPolicy)
	loadFlows(w, n)
	r := startFakeRun(w, 100*time.Millisecond, nil) // idle every 100 ms, as nfq's timeout
	defer r.halt()
	d := &state{cfg: &Config{}, sh: w.shared}
	count := 0
	t0 := time.Now()
	if err := d.Flows(context.Background(), "a", func(*control.Flow) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	t.Logf("listed %d idle flows in %v", count, el)
	if count != n {
		t.Errorf("listed %d flows, want %d", count, n)
	}
	// n/listChunk chunks: at 100 ms each (the receive timeout, not the
	// wake-ups) it would take 40 s; half that shows it on a loaded machine
	// too. 5 s is the timing figure.
	if el > 20*time.Second {
		t.Errorf("listing %d flows of an idle queue took %v: copied at the receive timeout, not on wake-ups", n, el)
	}
	timing.Check(t, el <= 5*time.Second, "listing %d flows of an idle queue took %v, want at most 5 s", n, el)
}

// TestListFlowsEnds: a listing ends with an error at a reload, when its
// reader gives up, and when the queue stops; the next listing works.
func TestListFlowsEnds(t *testing.T) {
	w := newTestWorker(t, listPolicy)
	loadFlows(w, 5000)
	r := startFakeRun(w, time.Millisecond, nil)
	d := &state{cfg: &Config{}, sh: w.shared}

	// The reader gives up after 10 flows.
	stopErr := errors.New("enough")
	count := 0
	err := d.Flows(context.Background(), "", func(*control.Flow) error {
		if count++; count == 10 {
			return stopErr
		}
		return nil
	})
	if !errors.Is(err, stopErr) {
		t.Errorf("emit's error: got %v", err)
	}
	// A reload after the first chunk.
	count = 0
	err = d.Flows(context.Background(), "", func(*control.Flow) error {
		if count++; count == 1 {
			next, _, err := w.cur.Load().Reload(compilePolicy(t, listPolicy))
			if err != nil {
				t.Fatal(err)
			}
			w.pending.Store(&generation{eng: next})
		}
		return nil
	})
	if !errors.Is(err, errReloaded) {
		t.Errorf("listing across a reload: %v, want %v", err, errReloaded)
	}
	// Cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	count = 0
	err = d.Flows(ctx, "", func(*control.Flow) error {
		if count++; count == 300 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled listing: %v", err)
	}
	// A whole listing after those.
	count = 0
	if err := d.Flows(context.Background(), "", func(*control.Flow) error { count++; return nil }); err != nil || count != 5000 {
		t.Errorf("listing after the others: %d flows, %v; want 5000", count, err)
	}
	if w.listing.Load() != nil {
		t.Error("the worker still holds a listing")
	}
	// The queue stops.
	r.halt()
	if err := d.Flows(context.Background(), "", func(*control.Flow) error { return nil }); !errors.Is(err, errStopped) {
		t.Errorf("listing a stopped queue: %v", err)
	}
}

// TestListingNoAllocs: a batch decided while a listing is in progress
// allocates nothing (the listing's first step sets it up).
func TestListingNoAllocs(t *testing.T) {
	w := newTestWorker(t, listPolicy)
	loadFlows(w, 100000)
	l := newListing("")
	w.listing.Store(l)
	d := udpFrom(1, 1000)
	batch := []nfq.Packet{{Data: d, Len: len(d)}}
	v := make([]nfq.Verdict, 1)
	now := int64(3e18)
	w.decide(batch, v, now) // first chunk
	c := <-l.full
	allocs := testing.AllocsPerRun(100, func() {
		l.free <- c.flows
		now++
		w.decide(batch, v, now)
		c = <-l.full
	})
	if allocs != 0 || len(c.flows) == 0 {
		t.Errorf("decide with a listing in progress: %v allocations (chunk of %d flows)", allocs, len(c.flows))
	}
}

// BenchmarkListChunk is what a listing adds to a batch: copying out one
// chunk of a big table (listChunk slots).
func BenchmarkListChunk(b *testing.B) {
	w := newTestWorker(b, listPolicy)
	loadFlows(w, 200000)
	l := newListing("")
	w.listing.Store(l)
	now := int64(3e18)
	w.list(now, 1)
	c := <-l.full
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if w.listing.Load() == nil { // done: list again
			l = newListing("")
			w.listing.Store(l)
		} else {
			l.free <- c.flows
		}
		w.list(now, 1)
		c = <-l.full
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/listChunk, "ns/flow")
}
