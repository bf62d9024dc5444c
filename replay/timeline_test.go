package replay

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/packetshaper/packetshaper/shaper"
)

const ms = int64(time.Millisecond)

// TestTimelineSteps walks a Timeline through packets, step by step: which
// bucket each lands in, when the width grows and buckets merge, and when
// an earlier packet adds buckets in front.
func TestTimelineSteps(t *testing.T) {
	t0 := int64(1_700_000_000_000) * ms // a multiple of 20 s
	type step struct {
		at    int64 // ns after t0
		row   int
		drop  bool
		exc   bool
		mark  bool
		width time.Duration // after the step
		start int64         // ns after t0
		n     int
	}
	steps := []step{
		{at: 0, width: 100 * time.Millisecond, start: 0, n: 1},
		{at: 50 * ms, row: 1, drop: true, width: 100 * time.Millisecond, start: 0, n: 1},
		{at: 100 * ms, exc: true, width: 100 * time.Millisecond, start: 0, n: 2},
		{at: 399 * ms, exc: true, mark: true, width: 100 * time.Millisecond, start: 0, n: 4},
		{at: -1, row: 1, width: 100 * time.Millisecond, start: -100 * ms, n: 5}, // before the first: a bucket in front
		{at: 450 * ms, width: 100 * time.Millisecond, start: -100 * ms, n: 6},
		// [-100 ms, 600 ms) is 7 buckets, more than 6: 200 ms buckets
		// from -200 ms.
		{at: 599 * ms, width: 200 * time.Millisecond, start: -200 * ms, n: 4},
		// 1 s buckets from -1 s: [-1 s, 0) and [0, 1 s) + [1 s, 2 s).
		{at: 1500 * ms, drop: true, width: time.Second, start: -1000 * ms, n: 3},
		// Far out: 2 s and 10 s buckets are still too many (27, 7);
		// 20 s buckets from -20 s: 4.
		{at: 50 * int64(time.Second), width: 20 * time.Second, start: -20000 * ms, n: 4},
	}
	tl := NewTimeline(2, 100*time.Millisecond, 6)
	for i, s := range steps {
		tl.add(t0+s.at, s.row, s.drop, s.exc, s.mark)
		if tl.Width() != s.width || tl.Start() != t0+s.start || tl.Len() != s.n {
			t.Fatalf("step %d: add(t0%+v): width %v start t0%+v len %d, want %v t0%+v %d",
				i, time.Duration(s.at), tl.Width(), time.Duration(tl.Start()-t0), tl.Len(), s.width, time.Duration(s.start), s.n)
		}
	}
	// The last layout, 20 s buckets from t0-20 s: bucket 0 holds the
	// packet at t0-1ns, bucket 1 those from t0 to t0+1.5 s, bucket 3 the
	// one at t0+50 s.
	want := map[[3]int]uint64{
		{0, 1, int(Offered)}: 1,
		{1, 0, int(Offered)}: 6, {1, 0, int(Dropped)}: 1, {1, 0, int(ShadowDropped)}: 1, {1, 0, int(Marked)}: 1,
		{1, 1, int(Offered)}: 1, {1, 1, int(Dropped)}: 1,
		{3, 0, int(Offered)}: 1,
	}
	for b := range tl.Len() {
		for row := range 2 {
			for k := Offered; k < numKinds; k++ {
				if got := tl.Count(b, row, k); got != want[[3]int{b, row, int(k)}] {
					t.Errorf("Count(%d, %d, %d) = %d, want %d", b, row, k, got, want[[3]int{b, row, int(k)}])
				}
			}
		}
	}
	if got := tl.Total(0, Offered); got != 7 {
		t.Errorf("Total(0, Offered) = %d, want 7", got)
	}
}

// TestTimelineProperty: whatever the order and spread of the timestamps,
// the Timeline holds at most its maximum of buckets, loses no packet, and
// each packet is counted in the bucket of the final width that holds its
// time.
func TestTimelineProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		maxB := 1 + rng.IntN(50)
		rows := 1 + rng.IntN(4)
		tl := NewTimeline(rows, time.Duration(rng.Int64N(int64(time.Second))), maxB)
		base := rng.Int64N(2e18) - 1e18 // before and after 1970
		spread := int64(1) << rng.IntN(50)
		type pkt struct {
			t   int64
			row int
		}
		var ps []pkt
		for range rng.IntN(500) {
			p := pkt{base + rng.Int64N(spread), rng.IntN(rows)}
			if rng.IntN(4) == 0 {
				p.t = base + int64(len(ps))*spread/500 // mostly ascending runs
			}
			ps = append(ps, p)
			tl.add(p.t, p.row, false, false, false)
		}
		if tl.Len() > maxB {
			t.Fatalf("trial %d: %d buckets, max %d", trial, tl.Len(), maxB)
		}
		want := make([]uint64, tl.Len()*rows)
		w := int64(tl.Width())
		for _, p := range ps {
			b := floorDiv(p.t, w) - floorDiv(tl.Start(), w)
			if b < 0 || b >= int64(tl.Len()) {
				t.Fatalf("trial %d: packet at %d outside the buckets [%d, +%d×%d)", trial, p.t, tl.Start(), tl.Len(), w)
			}
			want[int(b)*rows+p.row]++
		}
		for b := range tl.Len() {
			for row := range rows {
				if got := tl.Count(b, row, Offered); got != want[b*rows+row] {
					t.Fatalf("trial %d: bucket %d row %d: %d, want %d", trial, b, row, got, want[b*rows+row])
				}
			}
		}
		if len(ps) == 0 {
			continue
		}
		// Bucket 0 holds the earliest packet and the last bucket the
		// latest; buckets start at multiples of the width.
		var first, last uint64
		for row := range rows {
			first += tl.Count(0, row, Offered)
			last += tl.Count(tl.Len()-1, row, Offered)
		}
		if first == 0 || last == 0 || tl.Start()%w != 0 {
			t.Fatalf("trial %d: bucket 0 (at %d, width %d) or the last is empty, or not aligned", trial, tl.Start(), w)
		}
	}
}

// TestTimelineCells: a policy with very many rules gets fewer buckets, so
// that the counters stay within TimelineMaxCells.
func TestTimelineCells(t *testing.T) {
	tl := NewTimeline(shaper.MaxRules+ExtraRows, TimelineMinWidth, TimelineMaxBuckets)
	if n := tl.max * tl.stride; n > TimelineMaxCells || tl.max < timelineMinBuckets/2 {
		t.Errorf("%d rows: %d buckets, %d cells", tl.Rows(), tl.max, n)
	}
	if tl := NewTimeline(10, TimelineMinWidth, TimelineMaxBuckets); tl.max != TimelineMaxBuckets {
		t.Errorf("10 rows: %d buckets, want %d", tl.max, TimelineMaxBuckets)
	}
}

// TestTimelineMatchesRules: replayed captures give each Timeline row the
// totals that the engine counts per rule, and the unmatched, malformed and
// non-IP packets that Summary counts.
func TestTimelineMatchesRules(t *testing.T) {
	// markComp: a rule matching UDP to port 53 that marks, none for the rest.
	comp, markComp := compileMix(t)
	pol := comp.Policy()
	markPol := markComp.Policy()
	markPol.Malformed = shaper.Drop
	for _, c := range []struct {
		name   string
		pol    shaper.Policy
		ifaces func(string) uint32
		files  []string
	}{
		{"policy-mix", pol, comp.IfaceID, []string{"policy-mix.pcapng"}},
		{"mark", markPol, nil, []string{"policy-mix.pcapng", "vlan-mpls.pcap", "multiflow.pcap", "sll.pcap"}},
	} {
		eng, err := shaper.NewPolicy(c.pol)
		if err != nil {
			t.Fatal(err)
		}
		r := New(eng, Options{Timeline: true, IfaceID: c.ifaces})
		for _, f := range c.files {
			if err := r.ReplayFile(filepath.Join(testdata, f)); err != nil {
				t.Fatal(err)
			}
		}
		tl := r.Timeline()
		n := eng.NumRules()
		if tl.Rows() != n+ExtraRows {
			t.Fatalf("%s: %d rows for %d rules", c.name, tl.Rows(), n)
		}
		var all [numKinds]uint64
		for i, rs := range r.Rules() {
			got := [4]uint64{tl.Total(i, Offered), tl.Total(i, Dropped), tl.Total(i, ShadowDropped), tl.Total(i, Marked)}
			if want := [4]uint64{rs.Packets, rs.Dropped, rs.ShadowDropped, rs.Marked}; got != want {
				t.Errorf("%s: rule %s: timeline offered, dropped, shadow, marked %v, rule stats %v", c.name, rs.Name, got, want)
			}
		}
		for row := range tl.Rows() {
			for k := Offered; k < numKinds; k++ {
				all[k] += tl.Total(row, k)
			}
		}
		s := r.Summary()
		extra := [3]uint64{tl.Total(n+RowUnmatched, Offered), tl.Total(n+RowMalformed, Offered), tl.Total(n+RowNonIP, Offered)}
		if want := [3]uint64{s.Unmatched, s.Malformed, s.NonIP}; extra != want {
			t.Errorf("%s: timeline unmatched, malformed, non-IP %v, summary %v", c.name, extra, want)
		}
		if all[Offered] != s.Packets || all[Dropped] != s.Dropped {
			t.Errorf("%s: timeline offered %d dropped %d, summary %d %d", c.name, all[Offered], all[Dropped], s.Packets, s.Dropped)
		}
		if c.name == "mark" && (all[Marked] == 0 || s.Malformed == 0 || s.NonIP == 0 || s.Unmatched == 0) {
			t.Errorf("%s: the case should have marks, malformed, non-IP and unmatched packets: %v %+v", c.name, all, s)
		}
		if c.name == "policy-mix" && all[ShadowDropped] == 0 {
			t.Errorf("%s: no shadow drops", c.name)
		}
		// The buckets span the capture.
		if st := tl.Start(); st > s.First || st+int64(tl.Len())*int64(tl.Width()) <= s.Last {
			t.Errorf("%s: buckets [%d, +%d×%v) do not span the capture [%d, %d]", c.name, st, tl.Len(), tl.Width(), s.First, s.Last)
		}
	}
}

// TestNoAllocsTimeline: with Options.Timeline, the per-packet path still
// does not allocate, also when packets open new buckets, go back in time
// and make the buckets widen (the counters are allocated once, by New).
func TestNoAllocsTimeline(t *testing.T) {
	const n = 20000
	frames := make([][]byte, 100)
	for i := range frames {
		frames[i] = udpFrame(uint16(1024+i), 18)
	}
	rs := make([]rec, 0, n)
	at := int64(1.7e18)
	for k := range n {
		at += 50 * ms // 1000 s in all: the buckets widen from 100 ms to 2 s
		ts := at
		if k%97 == 0 {
			ts -= 30 * int64(time.Second) // now and then, back in time
		}
		rs = append(rs, rec{ts, frames[k%len(frames)]})
	}
	capture := pcapBytes(t, layers.LinkTypeEthernet, rs)
	eng, err := shaper.New(shaper.Config{Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	r := New(eng, Options{Timeline: true, Verdicts: discard{}})
	m := packetAllocs(t, r, capture, 1000, n-1000)
	if m != 0 {
		t.Errorf("%d allocations in %d packets, want 0", m, n-1000)
	}
	tl := r.Timeline()
	if tl.Width() < time.Second || tl.Total(0, Offered) != n {
		t.Errorf("width %v, %d packets counted; want ≥ 1s, %d", tl.Width(), tl.Total(0, Offered), n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
