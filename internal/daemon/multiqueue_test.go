package daemon

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// Several queues, one engine (issue 16, point 3): the kernel spreads one
// key's packets over the queues of --queue N-M; the key still has one
// bucket.

// srcPolicy limits each UDP source to a burst of 5 packets at pps packets
// a second, and accepts what it does not match.
func srcPolicy(pps string) string {
	return rule("per-src", `proto = ["udp"]`, `key = "src"`, "pps = "+pps, "burst = 5") + acceptRest
}

// mqPolicy limits each source to 5 packets (a rate too low to refill
// within a test).
var mqPolicy = srcPolicy("0.001")

var mqQueues = []uint16{20, 21, 22, 23}

// newMQWorkers returns the workers of queues 20-23 as Run makes them, over
// fake queues.
func newMQWorkers(t testing.TB, text string) ([]*worker, []*fakeQueue) {
	t.Helper()
	sh, fqs := newTestEngine(t, text, mqQueues...)
	return sh.ws, fqs
}

// srcPackets returns n packets of source 10.0.0.(1+src), each its own
// 5-tuple (source port 1000+i): one key for a "src" rule.
func srcPackets(src, n int) []nfq.Packet {
	var b []nfq.Packet
	for i := range n {
		d := udpFrom(1+src, uint16(1000+i))
		b = append(b, nfq.Packet{Data: d, Len: len(d)})
	}
	return b
}

func accepted(v []nfq.Verdict) (n int) {
	for _, x := range v {
		if x.Action == nfq.Accept {
			n++
		}
	}
	return n
}

// TestQueuesShareOneBucket: packets of one source alternate between four
// queues' workers; the source gets its burst once (5), not once per queue
// (20, as with one engine per queue); the counters, the flow listing, the
// status and the metrics count each packet and key once.
func TestQueuesShareOneBucket(t *testing.T) {
	ws, fqs := newMQWorkers(t, mqPolicy)
	now := int64(1e18)
	got := map[int]int{}
	for round := range 10 {
		for qi, w := range ws {
			for src := range 2 {
				b := srcPackets(src, 2)
				v := make([]nfq.Verdict, len(b))
				w.decide(b, v, now)
				got[src] += accepted(v)
				fqs[qi].stats.Packets += uint64(len(b))
			}
			now += int64(time.Millisecond)
		}
		_ = round
	}
	for src, n := range got {
		if n != 5 {
			t.Errorf("source %d: %d of 80 packets over 4 queues accepted, want 5 (one bucket of burst 5)", src, n)
		}
	}
	for _, w := range ws {
		w.stop(now)
	}
	select {
	case <-ws[0].done:
	default:
		t.Fatal("the engine's done is not closed after every queue stopped")
	}
	sn := ws[0].snap.Load()
	if sn.Packets != 160 || sn.Flows != 2 || sn.rules[0].Packets != 160 || sn.rules[0].Accepted != 10 {
		t.Errorf("snapshot: packets %d flows %d, rule per-src %+v; want 160 packets, 2 flows, 10 accepted", sn.Packets, sn.Flows, sn.rules[0].RuleStats)
	}

	d := &state{cfg: &Config{Queue: nfq.Config{MaxQueueLen: 100}}, sh: ws[0].shared, mon: fakeMonitor{}, policy: "p.toml", start: time.Unix(1_700_000_000, 0)}
	st := d.Status()
	if len(st.Queues) != 4 || len(st.Rules) != 2 || st.Rules[0].Packets != 160 || st.Rules[0].Accepted != 10 || st.Rules[0].Flows != 2 {
		t.Errorf("status: %d queues, rules %+v; want 4 queues, per-src with 160 packets, 10 accepted, 2 flows", len(st.Queues), st.Rules)
	}
	var flowsSum uint64
	for i, q := range st.Queues {
		flowsSum += q.Flows
		if q.Packets != 40 {
			t.Errorf("status: queue %d: %d packets, want 40 (its own counters)", q.Queue, q.Packets)
		}
		if i > 0 && q.Flows != 0 {
			t.Errorf("status: queue %d shows %d flows: the engine's flows belong on its first queue only", q.Queue, q.Flows)
		}
	}
	if flowsSum != 2 {
		t.Errorf("status: the queues' flows add up to %d, want 2", flowsSum)
	}

	// The listing is the engine's: one entry per key, while the four
	// queues go on deciding packets of both sources. The queues above
	// have stopped (a listing of a stopped engine ends at once): list a
	// fresh set of workers.
	ws2, _ := newMQWorkers(t, mqPolicy)
	for qi, w := range ws2 {
		b := srcPackets(qi%2, 2)
		w.decide(b, make([]nfq.Verdict, len(b)), now)
	}
	d2 := &state{cfg: d.cfg, sh: ws2[0].shared, mon: fakeMonitor{}}
	runs := make([]*fakeRun, len(ws2))
	for i, w := range ws2 {
		runs[i] = startFakeRun(w, time.Millisecond, func(n int) []nfq.Packet { return srcPackets(n%2, 2) })
	}
	// startFakeRun set each worker's wake (the engine's, shared): wake
	// them all.
	ws2[0].wake = func() {
		for _, r := range runs {
			select {
			case r.wakeCh <- struct{}{}:
			default:
			}
		}
	}
	var listed []control.Flow
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d2.Flows(ctx, "", func(f *control.Flow) error { listed = append(listed, *f); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		close(r.stop)
		<-r.done
	}
	keys := map[string]int{}
	for _, f := range listed {
		keys[f.Key]++
		if f.Queue != 20 {
			t.Errorf("listed flow %+v: queue %d, want 20 (the engine's first queue)", f, f.Queue)
		}
	}
	if len(listed) != 2 || len(keys) != 2 || listed[0].Packets+listed[1].Packets < 8 {
		t.Errorf("listed %+v, want 2 flows (one per source) of at least 8 packets in all", listed)
	}

	// Metrics: the queues' series per queue, the engine's once, labelled
	// by the queues it serves.
	c := newCollector(d)
	want := `
# HELP packetshaper_rule_packets_total Packets a rule decided.
# TYPE packetshaper_rule_packets_total counter
packetshaper_rule_packets_total{path="queue",queue="20-23",rule="per-src"} 160
packetshaper_rule_packets_total{path="queue",queue="20-23",rule="rest"} 0
# HELP packetshaper_flows Flows in the flow tables (with --fastpath, the kernel's flow maps' too).
# TYPE packetshaper_flows gauge
packetshaper_flows{queue="20-23"} 2
# HELP packetshaper_packets_total Packets decided.
# TYPE packetshaper_packets_total counter
packetshaper_packets_total{queue="20"} 40
packetshaper_packets_total{queue="21"} 40
packetshaper_packets_total{queue="22"} 40
packetshaper_packets_total{queue="23"} 40
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "packetshaper_rule_packets_total", "packetshaper_flows", "packetshaper_packets_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// The stats line's totals: each rule's packets once.
	if v := lineValues(d.statsAttrs(time.Second, true)); v["rule.per-src.packets"] != uint64(160) || v["flows"] != uint64(2) || v["packets"] != uint64(160) {
		t.Errorf("stats line %v: want rule.per-src.packets, flows, packets 160, 2, 160", v)
	}
}

// TestQueuesShareOneBucketConcurrently: four queue goroutines decide
// batches of the same source at once; the source still gets its burst once
// (run with -race: the engine is used under the lock only).
func TestQueuesShareOneBucketConcurrently(t *testing.T) {
	ws, _ := newMQWorkers(t, mqPolicy)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := srcPackets(0, 16)
			v := make([]nfq.Verdict, len(b))
			n := 0
			for i := range 50 {
				clear(v)
				w.decide(b, v, int64(1e18)+int64(i)*int64(time.Microsecond))
				n += accepted(v)
				w.idle(int64(1e18) + int64(i)*int64(time.Microsecond))
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 5 {
		t.Errorf("4 queues × 50 batches × 16 packets of one source at once: %d accepted, want 5", total)
	}
}

// TestQueuesReload: a reload with several queues hands the one engine's
// state on: the source's empty bucket stays empty whichever queue decides
// its next packets, the first queue to decide swaps the new engine in for
// all, and counters go on.
func TestQueuesReload(t *testing.T) {
	ws, _ := newMQWorkers(t, mqPolicy)
	now := int64(1e18)
	b := srcPackets(0, 8)
	v := make([]nfq.Verdict, len(b))
	ws[0].decide(b, v, now)
	if n := accepted(v); n != 5 {
		t.Fatalf("first batch: %d accepted, want 5", n)
	}
	// The same policy again (a SIGHUP with an unchanged file).
	pol := compilePolicy(t, mqPolicy)
	kept, swapped, err := ws[0].install(func(base *shaper.Engine) (*shaper.Engine, []string, error) { return base.Reload(pol) })
	if err != nil || len(kept) != 2 {
		t.Fatalf("install: %v, kept %v", err, kept)
	}
	next := ws[0].pending.Load().eng
	select {
	case <-swapped:
		t.Fatal("the reload's channel closed before any queue swapped its engine in")
	default:
	}
	for i, w := range ws[1:] {
		now += int64(time.Millisecond)
		clear(v)
		w.decide(b, v, now)
		if n := accepted(v); n != 0 {
			t.Errorf("queue %d after the reload: %d accepted, want 0 (the bucket kept empty)", w.queue, n)
		}
		if i == 0 && (w.eng != next || w.pending.Load() != nil) {
			t.Fatal("the first queue to decide after the reload did not swap the new engine in")
		}
		if i == 0 {
			select {
			case <-swapped:
			default:
				t.Fatal("the swap did not close the reload's channel")
			}
		}
	}
	for _, w := range ws {
		if w.eng != next || w.cur.Load() != next {
			t.Errorf("queue %d does not decide with the new engine", w.queue)
		}
	}
	// A reload changing the burst starts the rule afresh, once for all.
	pol2 := compilePolicy(t, strings.Replace(mqPolicy, "burst = 5", "burst = 3", 1))
	if _, _, err := ws[2].install(func(base *shaper.Engine) (*shaper.Engine, []string, error) { return base.Reload(pol2) }); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range ws {
		now += int64(time.Millisecond)
		clear(v)
		w.decide(b, v, now)
		n += accepted(v)
	}
	if n != 3 {
		t.Errorf("after a reload to burst 3: %d accepted over 4 queues, want 3", n)
	}
	ws[3].snapshot(now)
	if s := ws[0].snap.Load(); s.Packets != 8*(1+3+4) {
		t.Errorf("packets after two reloads: %d, want %d (the counters go on)", s.Packets, 8*(1+3+4))
	}
}

// holdQueue is a fake queue with room for room more held packets.
type holdQueue struct {
	fakeQueue
	room int
}

func (q *holdQueue) HoldRoom() int { return q.room }

// TestQueuesHoldRoom: a shared shaping engine uses the hold room of the
// queue whose batch it decides: the queue that can hold nothing more has
// its delayed packets dropped (shape overflow), the other holds them.
func TestQueuesHoldRoom(t *testing.T) {
	eng, err := shaper.New(shaper.Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: int64(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ws := newEngine([]uint16{0, 1}, eng).ws
	full, roomy := &holdQueue{room: 0}, &holdQueue{room: 1000}
	ws[0].q, ws[1].q = full, roomy
	now := int64(1e18)
	b := srcPackets(0, 1)
	b = append(b, b[0], b[0], b[0])
	v := make([]nfq.Verdict, len(b))
	ws[1].decide(b, v, now) // the first at once, then 10 ms apart
	for i, x := range v {
		if x.Action != nfq.Accept || (i > 0) != (x.At > now) {
			t.Errorf("roomy queue, packet %d: %+v, want accepted, held from the second on", i, x)
		}
	}
	clear(v)
	ws[0].decide(b, v, now)
	for i, x := range v {
		if x.Action != nfq.Drop {
			t.Errorf("full queue, packet %d: %+v, want dropped (no room to hold it)", i, x)
		}
	}
	clear(v)
	ws[1].decide(b[:1], v[:1], now)
	if v[0].Action != nfq.Accept || v[0].At != now+40e6 {
		t.Errorf("roomy queue again: %+v, want held until now+40ms (the full queue's drops uncharged)", v[0])
	}
}

// TestQueuesDecideDoesNotAllocate: batches alternating between four
// queues' workers on one engine cost no allocation.
func TestQueuesDecideDoesNotAllocate(t *testing.T) {
	ws, _ := newMQWorkers(t, mqPolicy)
	batch := make([]nfq.Packet, 64)
	for i := range batch {
		d := udpFrom(1+i%16, uint16(1000+i))
		batch[i] = nfq.Packet{Data: d, Len: len(d)}
	}
	v := make([]nfq.Verdict, len(batch))
	now := int64(1e18)
	for _, w := range ws {
		w.decide(batch, v, now) // the flows enter the table
	}
	i := 0
	if allocs := testing.AllocsPerRun(200, func() {
		now += int64(time.Microsecond)
		clear(v)
		ws[i%len(ws)].decide(batch, v, now)
		ws[i%len(ws)].idle(now)
		i++
	}); allocs != 0 {
		t.Errorf("decide of a 64-packet batch, queues taking turns: %v allocations, want 0", allocs)
	}
}
