package hist

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

// The two layouts the project used before this package, written out as
// they were: shaper's delays (ns) and nfq's latencies (µs).
func shaperBucket(v int64) int {
	if v < 128 {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1
	return min(128+(e-7)*64+int((v>>(e-6))&63), 128+(36-7)*64-1)
}

func nfqBucket(us int64) int {
	if us < 1024 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 1
	return min(1024+(e-10)*16+int((us>>(e-4))&15), 1024+16*16-1)
}

func TestLayoutsAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		l   Layout
		old func(int64) int
		n   int
	}{{NewLayout(7, 6, 36), shaperBucket, 128 + 29*64}, {NewLayout(10, 4, 26), nfqBucket, 1024 + 16*16}} {
		if c.l.Buckets() != c.n {
			t.Errorf("%+v: %d buckets, want %d", c.l, c.l.Buckets(), c.n)
		}
		for i := 0; i < 100000; i++ {
			v := int64(rng.Uint64() >> (1 + rng.IntN(63)))
			if i%7 == 0 {
				v = -v
			}
			if got, want := c.l.Bucket(v), c.old(v); got != want {
				t.Fatalf("%+v: bucket(%d) = %d, want %d", c.l, v, got, want)
			}
		}
		// Every bucket's upper bound is in it, and one more is in the next.
		for b := 0; b < c.l.Buckets()-1; b++ {
			u := c.l.Upper(b)
			if c.l.Bucket(u) != b || c.l.Bucket(u+1) != b+1 {
				t.Fatalf("%+v: upper(%d) = %d in %d, +1 in %d", c.l, b, u, c.l.Bucket(u), c.l.Bucket(u+1))
			}
		}
	}
}

// TestQuantiles checks the quantiles against a sort: an upper bound,
// within 1/2^SubBits, at most Max; Hist and Atomic agree.
func TestQuantiles(t *testing.T) {
	l := NewLayout(7, 6, 36)
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 50; round++ {
		h, a := New(l), NewAtomic(l)
		var vs []int64
		var sum int64
		for i := 0; i < 1+rng.IntN(2000); i++ {
			v := rng.Int64N(1 << (1 + rng.IntN(30)))
			vs = append(vs, v)
			sum += v
			h.Add(v)
			a.Add(v)
			a.AddSum(v)
		}
		slices.Sort(vs)
		s := h.Stats()
		if s != a.Stats() {
			t.Fatalf("Hist %+v, Atomic %+v", s, a.Stats())
		}
		n := len(vs)
		exact := func(f float64) int64 {
			r := int(f*float64(n) + 0.999999999)
			return vs[max(r, 1)-1]
		}
		if s.Count != uint64(n) || s.Sum != sum || s.Max != vs[n-1] {
			t.Fatalf("stats %+v, want count %d sum %d max %d", s, n, sum, vs[n-1])
		}
		for _, q := range []struct {
			got int64
			f   float64
		}{{s.P50, 0.5}, {s.P99, 0.99}} {
			e := exact(q.f)
			if q.got < e || q.got > s.Max || float64(q.got-e) > float64(e)/64+1 {
				t.Fatalf("p%v = %d, exact %d (max %d)", q.f*100, q.got, e, s.Max)
			}
		}
	}
	if s := New(l).Stats(); s != (Stats{}) {
		t.Fatalf("empty: %+v", s)
	}
}

func TestFold(t *testing.T) {
	l := NewLayout(3, 2, 20)
	h, a := New(l), NewAtomic(l)
	vals := []int64{0, 1, 7, 8, 9, 10, 11, 12, 15, 16, 100, 1000, 1 << 25}
	for _, v := range vals {
		h.Add(v)
		a.Add(v)
	}
	bounds := []int64{0, 7, 9, 11, 15, 1000, 1 << 30}
	cum := make([]uint64, len(bounds))
	n := h.Fold(bounds, cum)
	for j, b := range bounds {
		// A value counts at a bound when its whole bucket lies at or below.
		var want uint64
		for _, v := range vals {
			if l.Upper(l.Bucket(v)) <= b {
				want++
			}
		}
		if cum[j] != want {
			t.Errorf("bound %d: %d, want %d", b, cum[j], want)
		}
	}
	if n != uint64(len(vals)) {
		t.Errorf("total %d", n)
	}
	cum2 := make([]uint64, len(bounds))
	if n2, _ := a.Fold(bounds, cum2); n2 != n || !slices.Equal(cum, cum2) {
		t.Errorf("Atomic fold %v, Hist %v", cum2, cum)
	}
	o := NewAtomic(l)
	a.MergeInto(o)
	a.MergeInto(o)
	if s := o.Stats(); s.Count != 2*n || s.Max != 1<<25 {
		t.Errorf("merged %+v", s)
	}
}

func TestAddNoAlloc(t *testing.T) {
	h, a := New(NewLayout(7, 6, 36)), NewAtomic(NewLayout(10, 4, 26))
	v := int64(1)
	if n := testing.AllocsPerRun(1000, func() { v = v*3 + 1; h.Add(v & (1<<40 - 1)); a.Add(v & 0xffffff) }); n != 0 {
		t.Fatalf("%v allocations per Add", n)
	}
}
