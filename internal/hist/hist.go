// Package hist is the project's one log-linear histogram: exact below
// 2^LinBits, then 2^SubBits buckets per power of two up to 2^MaxExp, so a
// value is known to within 1/2^SubBits. The unit of the values is the
// caller's (ns, µs, bytes).
//
// Hist is written by one goroutine and read by it; Atomic is written by
// one goroutine and read (Stats, Fold) by any. Both share one Layout, so
// the bucket arithmetic, the quantiles and the folding into caller-chosen
// bounds are written once.
//
// It is a leaf utility package: it imports nothing of ours, so any package
// may use it, including shaper (which otherwise imports only flows): a
// leaf package under internal/ is the documented exception to the import
// rules.
package hist

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// Layout is a histogram's bucket arithmetic.
type Layout struct {
	linBits, subBits, maxExp int
}

// NewLayout returns the layout of 2^linBits exact buckets (values 0 to
// 2^linBits-1), then 2^subBits per power of two up to 2^maxExp (larger
// values go in the last bucket). It panics unless 0 <= subBits <= linBits
// < maxExp < 63: the layouts are constants of their callers.
func NewLayout(linBits, subBits, maxExp int) Layout {
	if subBits < 0 || subBits > linBits || linBits >= maxExp || maxExp >= 63 {
		panic("hist: bad layout")
	}
	return Layout{linBits, subBits, maxExp}
}

// Buckets is the number of buckets.
func (l Layout) Buckets() int {
	return 1<<l.linBits + (l.maxExp-l.linBits)<<l.subBits
}

// Bucket is v's bucket (a negative v counts as 0).
func (l Layout) Bucket(v int64) int {
	lin := int64(1) << l.linBits
	if v < lin {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1 // 2^e <= v < 2^(e+1), e >= linBits
	sub := int((v >> (e - l.subBits)) & (1<<l.subBits - 1))
	b := int(lin) + (e-l.linBits)<<l.subBits + sub
	return min(b, l.Buckets()-1)
}

// Upper is the largest value in bucket b (but for the last bucket, which
// also holds every larger value).
func (l Layout) Upper(b int) int64 {
	lin := 1 << l.linBits
	if b < lin {
		return int64(b)
	}
	e := (b-lin)>>l.subBits + l.linBits
	sub := int64((b - lin) & (1<<l.subBits - 1))
	return 1<<e + (sub+1)<<(e-l.subBits) - 1
}

// quantile is the bucket holding the value of rank ceil(f × total) (at
// least 1) among counts; -1 if total is 0.
func quantile(counts func(int) uint64, n int, total uint64, f float64) int {
	if total == 0 {
		return -1
	}
	rank := max(uint64(math.Ceil(f*float64(total))), 1)
	var c uint64
	for i := range n {
		if c += counts(i); c >= rank {
			return i
		}
	}
	return n - 1
}

// fold writes into cum[j] how many values are known to be at most
// bounds[j] (ascending): a bucket counts towards a bound when all of it
// lies at or below it. It returns the total count.
func (l Layout) fold(counts func(int) uint64, bounds []int64, cum []uint64) uint64 {
	var n uint64
	j := 0
	for b := range l.Buckets() {
		for up := l.Upper(b); j < len(bounds) && bounds[j] < up; j++ {
			cum[j] = n
		}
		n += counts(b)
	}
	for ; j < len(bounds); j++ {
		cum[j] = n
	}
	return n
}

// Stats summarise a histogram. Quantiles are the upper bounds of their
// buckets, at most Max.
type Stats struct {
	Count         uint64
	Sum           int64 // over all Count values
	P50, P99, Max int64
}

func (l Layout) stats(counts func(int) uint64, count uint64, sum, mx int64) Stats {
	s := Stats{Count: count, Sum: sum, Max: mx}
	n := l.Buckets()
	if b := quantile(counts, n, count, 0.50); b >= 0 {
		s.P50 = min(l.Upper(b), mx)
	}
	if b := quantile(counts, n, count, 0.99); b >= 0 {
		s.P99 = min(l.Upper(b), mx)
	}
	return s
}

// Hist is a histogram for one goroutine. Make it with New.
type Hist struct {
	l     Layout
	b     []uint64
	count uint64
	sum   int64
	max   int64
}

// New returns an empty histogram of layout l (its buckets are allocated
// here, once).
func New(l Layout) *Hist { return &Hist{l: l, b: make([]uint64, l.Buckets())} }

// Add counts v. It does not allocate.
func (h *Hist) Add(v int64) {
	h.b[h.l.Bucket(v)]++
	h.count++
	h.sum += v
	h.max = max(h.max, v)
}

// Stats summarises the values counted.
func (h *Hist) Stats() Stats {
	return h.l.stats(func(i int) uint64 { return h.b[i] }, h.count, h.sum, h.max)
}

// Fold writes into cum (len(bounds)) the cumulative counts at bounds,
// which must be ascending (see Atomic.Fold); it returns the total.
func (h *Hist) Fold(bounds []int64, cum []uint64) uint64 {
	return h.l.fold(func(i int) uint64 { return h.b[i] }, bounds, cum)
}

// Atomic is a histogram written by one goroutine and read by any. Its sum
// may be added apart from the values (AddSum), e.g. once per batch. Make
// it with NewAtomic.
type Atomic struct {
	l   Layout
	b   []atomic.Uint64
	max atomic.Int64
	sum atomic.Int64
}

// NewAtomic returns an empty Atomic of layout l.
func NewAtomic(l Layout) *Atomic { return &Atomic{l: l, b: make([]atomic.Uint64, l.Buckets())} }

// Add counts v (not into the sum: see AddSum). One writer at a time.
func (h *Atomic) Add(v int64) {
	h.b[h.l.Bucket(v)].Add(1)
	if v > h.max.Load() {
		h.max.Store(v)
	}
}

// AddSum adds v to the sum.
func (h *Atomic) AddSum(v int64) { h.sum.Add(v) }

// MergeInto adds h's counts to o (both quiescent, of one layout).
func (h *Atomic) MergeInto(o *Atomic) {
	for i := range h.b {
		o.b[i].Add(h.b[i].Load())
	}
	o.sum.Add(h.sum.Load())
	if m := h.max.Load(); m > o.max.Load() {
		o.max.Store(m)
	}
}

// Stats summarises the values counted so far (a snapshot of the buckets).
func (h *Atomic) Stats() Stats {
	counts := make([]uint64, len(h.b))
	var n uint64
	for i := range counts {
		counts[i] = h.b[i].Load()
		n += counts[i]
	}
	return h.l.stats(func(i int) uint64 { return counts[i] }, n, h.sum.Load(), h.max.Load())
}

// Fold writes into cum (len(bounds)) how many values are known to be at
// most each of bounds (ascending), and returns the total and the sum.
func (h *Atomic) Fold(bounds []int64, cum []uint64) (count uint64, sum int64) {
	return h.l.fold(func(i int) uint64 { return h.b[i].Load() }, bounds, cum), h.sum.Load()
}
