package shaper

import (
	"math"
	"math/bits"
)

// DelayStats summarise the delays (ns) of held packets: how long after its
// arrival each was to depart. Quantiles are upper bounds of histogram
// buckets: exact below 128 ns, within 1/64 above.
type DelayStats struct {
	Count         uint64
	Sum           int64 // ns, over all Count delays
	P50, P99, Max int64
}

// delayHist is a log-linear histogram of delays in ns: one bucket per ns
// below 128, then 64 per power of two up to 2^36 ns (69 s; delays are at
// most MaxMaxDelay). Only the deciding goroutine writes it.
type delayHist struct {
	b     [delayBuckets]uint64
	count uint64
	sum   int64
	max   int64
}

const (
	delayLinear  = 128
	delaySub     = 64
	delayBuckets = delayLinear + (36-7)*delaySub
)

func delayBucket(v int64) int {
	if v < delayLinear {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1 // 2^e <= v < 2^(e+1), e >= 7
	b := delayLinear + (e-7)*delaySub + int((v>>(e-6))&(delaySub-1))
	return min(b, delayBuckets-1)
}

// delayUpper is the largest value in bucket b.
func delayUpper(b int) int64 {
	if b < delayLinear {
		return int64(b)
	}
	e := (b-delayLinear)/delaySub + 7
	sub := int64((b - delayLinear) % delaySub)
	return 1<<e + (sub+1)<<(e-6) - 1
}

func (h *delayHist) add(v int64) {
	h.b[delayBucket(v)]++
	h.count++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

func (h *delayHist) stats() DelayStats {
	s := DelayStats{Count: h.count, Sum: h.sum, Max: h.max}
	if h.count == 0 {
		return s
	}
	q := func(f float64) int64 {
		rank := max(uint64(math.Ceil(f*float64(h.count))), 1)
		var c uint64
		for i, n := range h.b {
			if c += n; c >= rank {
				return min(delayUpper(i), h.max)
			}
		}
		return h.max
	}
	s.P50, s.P99 = q(0.50), q(0.99)
	return s
}
