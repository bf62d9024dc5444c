package replay

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/packetshaper/packetshaper/shaper"
)

// expectShapeHeld is expectShape with live's --max-held: a packet the
// shaper would delay while maxHeld packets are held (departing after its
// arrival) is dropped and not charged: the queue's state (TAT) stays as
// it was. Each packet's departure (ns), or -1 for a drop.
func expectShapeHeld(ts []int64, rate, burst, maxDelay int64, maxHeld int) []int64 {
	T := int64(1e9) / rate
	tau := (burst - 1) * T
	tat := ts[0]
	var held []int64 // departures after the current arrival
	out := make([]int64, len(ts))
	for i, t := range ts {
		kept := held[:0]
		for _, d := range held {
			if d > t {
				kept = append(kept, d)
			}
		}
		held = kept
		dep := max(t, tat-tau)
		if dep-t > maxDelay || dep > t && len(held) >= maxHeld {
			out[i] = -1
			continue
		}
		out[i] = dep
		tat = max(tat, t) + T
		if dep > t {
			held = append(held, dep)
		}
	}
	return out
}

// TestMaxHeld replays what the attacker compared with live: one UDP flow
// at 5000 packets/s for 3 s through --pps 1000 --shape --max-delay 1s
// (burst 5), whose queue (1000 packets) is far above --max-held 25. Each
// packet's verdict equals the model's (expectShapeHeld: a delayed packet
// beyond 25 held is dropped, uncharged, as live drops it), with or
// without --write-accepted; the accepted count is about 3000 + 25 + 5, as
// live delivers, not the 4004 an unbounded queue passes.
func TestMaxHeld(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	f := constFlow{sport: 10000, rate: 5000, start: t0 + 123_456, n: 15000}
	ts := f.times()
	recs := make([]rec, len(ts))
	for i, at := range ts {
		recs[i] = rec{at, udpFrame(f.sport, 10)}
	}
	capture := pcapBytes(t, layers.LinkTypeEthernet, recs)
	const rate, burst, maxDelay, maxHeld = 1000, 5, int64(time.Second), 25
	model := expectShapeHeld(ts, rate, burst, maxDelay, maxHeld)
	want := 0
	for _, d := range model {
		if d >= 0 {
			want++
		}
	}
	unbounded := 0
	for _, d := range expectShape(ts, rate, burst, maxDelay) {
		if d >= 0 {
			unbounded++
		}
	}
	t.Logf("model: %d accepted of %d with --max-held %d; %d with no bound", want, len(ts), maxHeld, unbounded)
	if want < 3000 || want > 3000+maxHeld+burst+1 || unbounded < 4000 {
		t.Fatalf("model gives %d (unbounded %d): not the case the test is about", want, unbounded)
	}
	for _, output := range []bool{false, true} {
		eng, err := shaper.New(shaper.Config{Rate: rate, Burst: burst, Shape: true, MaxDelay: maxDelay})
		if err != nil {
			t.Fatal(err)
		}
		var verdicts, acc bytes.Buffer
		o := Options{Verdicts: &verdicts, MaxHeld: maxHeld}
		if output {
			o.Accepted = &acc
		}
		r := New(eng, o)
		if err := r.Replay("maxheld.pcap", bytes.NewReader(capture), 0); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(&verdicts)
		for i := 0; sc.Scan(); i++ {
			w := fmt.Sprintf("%d ACCEPT", i+1)
			switch d := model[i]; {
			case d < 0:
				w = fmt.Sprintf("%d DROP", i+1)
			case d > ts[i]:
				w += fmt.Sprintf(" +%d", d-ts[i])
			}
			if sc.Text() != w {
				t.Fatalf("--write-accepted %v: verdict %q, the model's %q", output, sc.Text(), w)
			}
		}
		s := r.Summary()
		if s.Accepted != uint64(want) || s.Packets != uint64(len(ts)) || s.ShapeOverflow != s.Dropped {
			t.Errorf("--write-accepted %v: accepted %d of %d (overflow %d, dropped %d), the model %d", output, s.Accepted, s.Packets, s.ShapeOverflow, s.Dropped, want)
		}
		if output {
			if n := countRecords(t, acc.Bytes()); n != want {
				t.Errorf("--write-accepted holds %d packets, want %d", n, want)
			}
		}
	}
}

func countRecords(t *testing.T, capture []byte) int {
	t.Helper()
	n, err := readAll(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHeldBytesBounded: 20 flows of 128 KiB records, within 0.4 s,
// through --pps 10 --shape --max-delay 10s with no bound on the count
// held: the held packets would take 50 MiB; they never take more than
// MaxHeldBytes, a packet beyond is dropped (shape_overflow), the verdicts
// are the same whether --write-accepted copies the held packets or not,
// and what the copies allocate is bounded by it too.
func TestHeldBytesBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("streams hundreds of MB through code with no goroutine: nothing for the race detector, five times as long (scripts/test.sh runs this test without -race first)")
	}
	const size, n = 128 << 10, 400
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	recs := make([]rec, n)
	for i := range recs {
		recs[i] = rec{t0 + int64(i)*1e6, udpFrame(uint16(1000+i%20), size-42)}
	}
	capture := pcapBytes(t, layers.LinkTypeEthernet, recs)
	var out [2]bytes.Buffer
	for i, output := range []bool{false, true} {
		eng, err := shaper.New(shaper.Config{Rate: 10, Burst: 1, Shape: true, MaxDelay: int64(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Verdicts: &out[i]}
		if output {
			o.Accepted = discard{}
		}
		r := New(eng, o)
		rd, err := NewReader(bytes.NewReader(capture))
		if err != nil {
			t.Fatal(err)
		}
		peak := 0
		a := allocated(func() {
			for {
				data, ci, lt, err := rd.Next()
				if err != nil {
					break
				}
				if err := r.packet(data, &ci, lt); err != nil {
					t.Fatal(err)
				}
				peak = max(peak, r.heldBytes)
			}
			r.Flush()
		})
		s := r.Summary()
		t.Logf("--write-accepted %v: %d accepted, %d delayed, %d shape_overflow; held at most %.1f MiB; allocated %.1f MiB",
			output, s.Accepted, s.Delayed, s.ShapeOverflow, float64(peak)/(1<<20), float64(a)/(1<<20))
		if peak > MaxHeldBytes || peak < MaxHeldBytes-2*size || s.ShapeOverflow == 0 || s.Packets != n {
			t.Errorf("held at most %d bytes (bound %d), %d shape_overflow of %d packets", peak, MaxHeldBytes, s.ShapeOverflow, s.Packets)
		}
		if output && a > 3*MaxHeldBytes {
			t.Errorf("copies of the held packets allocated %d bytes, more than 3 × %d", a, MaxHeldBytes)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Errorf("the verdicts differ with --write-accepted")
	}
}
