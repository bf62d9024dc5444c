package daemon

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// udp4 returns an IPv4/UDP packet from 10.0.0.1:sport to 10.0.0.2:9000.
func udp4(sport uint16) []byte {
	p := make([]byte, 28+16)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64
	p[9] = 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], 9000)
	return p
}

func TestDecideDoesNotAllocate(t *testing.T) {
	eng, err := shaper.New(shaper.Config{Rate: 10, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(0, eng)
	batch := make([]nfq.Packet, 64)
	for i := range batch {
		d := udp4(uint16(1000 + i%8))
		batch[i] = nfq.Packet{ID: uint32(i + 1), Data: d, Len: len(d)}
	}
	v := make([]nfq.Verdict, len(batch))
	now := int64(1e18)
	w.decide(batch, v, now) // the flows enter the table
	if allocs := decideAllocs(100, w, batch, v, &now, int64(time.Millisecond)); allocs != 0 {
		t.Errorf("decide of a 64-packet batch: %v allocations, want 0", allocs)
	}
	// 8 flows, burst 5: the first batch accepted 5 of each flow's 8.
	if s := eng.Stats(); s.Flows != 8 {
		t.Errorf("flows = %d, want 8", s.Flows)
	}
}

// TestWorkerReload: a pending engine made by Engine.Reload takes over at
// the next batch; a rule whose settings did not change keeps its flows'
// state, a changed one starts afresh; the snapshot's counters go on.
func TestWorkerReload(t *testing.T) {
	a := rule("a", udpSport(1000), "pps = 0.001", "burst = 2")
	b := func(burst int) string {
		return rule("b", udpSport(1001), "pps = 0.001", fmt.Sprintf("burst = %d", burst))
	}
	w := newTestWorker(t, a+b(2))
	batch := func() ([]nfq.Packet, []nfq.Verdict) {
		var bs []nfq.Packet
		for i := 0; i < 4; i++ {
			for f := 0; f < 2; f++ {
				d := udp4(uint16(1000 + f))
				bs = append(bs, nfq.Packet{Data: d, Len: len(d)})
			}
		}
		return bs, make([]nfq.Verdict, len(bs))
	}
	drops := func(v []nfq.Verdict) (n int) {
		for _, x := range v {
			if x.Action == nfq.Drop {
				n++
			}
		}
		return n
	}
	now := int64(1e18)
	bt, v := batch()
	w.decide(bt, v, now)
	if d := drops(v); d != 4 { // burst 2 each: 2 of 4 pass per flow
		t.Fatalf("first batch: %d drops, want 4", d)
	}
	// b's burst changes: a keeps its empty bucket, b starts afresh.
	next, kept, err := w.cur.Load().Reload(compilePolicy(t, a+b(3)))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0] != "a" {
		t.Errorf("kept %v, want [a]", kept)
	}
	w.pending.Store(&generation{eng: next})
	now += int64(time.Millisecond)
	bt, v = batch()
	w.decide(bt, v, now)
	if w.eng != next || w.pending.Load() != nil || w.cur.Load() != next {
		t.Fatal("the pending engine did not take over at the batch")
	}
	if d := drops(v); d != 4+1 { // a: all 4 dropped; b: 3 of 4 pass
		t.Errorf("batch after the reload: %d drops, want 5", d)
	}
	s := w.snap.Load()
	if s.Packets != 16 || len(s.rules) != 2 || s.rules[0].Packets != 8 || s.rules[1].Packets != 4 {
		t.Errorf("snapshot after the reload: %+v", s)
	}
	// No allocation per batch when nothing is pending.
	if allocs := decideAllocs(50, w, bt, v, &now, int64(time.Microsecond)); allocs != 0 {
		t.Errorf("decide: %v allocations, want 0", allocs)
	}
}

// TestWorkerShape: a shaping rule's delays become the verdicts' At, on the
// batch's clock; packets accepted at once have none; a reload hands the
// shaping rule's queue (its flows' debt) to the new engine.
func TestWorkerShape(t *testing.T) {
	eng, err := shaper.New(shaper.Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: int64(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(0, eng)
	batch := make([]nfq.Packet, 4)
	for i := range batch {
		d := udp4(1000)
		batch[i] = nfq.Packet{ID: uint32(i + 1), Data: d, Len: len(d)}
	}
	v := make([]nfq.Verdict, len(batch))
	now := int64(1e18)
	w.decide(batch, v, now)
	for i, want := range []int64{0, now + 10e6, now + 20e6, now + 30e6} {
		if v[i].At != want || v[i].Action != nfq.Accept {
			t.Errorf("packet %d: %+v, want accept at %d", i, v[i], want)
		}
	}
	next, kept, err := w.cur.Load().Reload(shaper.Policy{Rules: []shaper.Rule{{Name: "default", Limit: shaper.Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: int64(100 * time.Millisecond)}}}})
	if err != nil || len(kept) != 1 {
		t.Fatalf("reload: %v, kept %v", err, kept)
	}
	w.pending.Store(&generation{eng: next})
	clear(v)
	w.decide(batch[:1], v[:1], now)
	if v[0].At != now+40e6 {
		t.Errorf("after the reload: %+v, want at now+40ms, behind the packets held before it", v[0])
	}
	if s := w.snap.Load(); s.Delayed != 4 || s.delays.Count != 4 {
		t.Errorf("snapshot %+v", s)
	}
	if allocs := decideAllocs(50, w, batch, v, &now, int64(time.Millisecond)); allocs != 0 {
		t.Errorf("decide with shaping: %v allocations, want 0", allocs)
	}
}
