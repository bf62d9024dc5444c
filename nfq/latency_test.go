package nfq

import (
	"testing"
	"time"
)

// TestLatencyQuantilesAtMostMax: a quantile is its bucket's upper bound
// plus the microsecond the values were truncated by, but never above the
// largest latency measured (kept in ns).
func TestLatencyQuantilesAtMostMax(t *testing.T) {
	h := newLatencyHist()
	if s := h.stats(); s != (LatencyStats{}) {
		t.Errorf("empty: %+v, want zero", s)
	}
	h.add(3500) // 3.5 µs: the bucket of 3 µs, [3, 4) µs
	h.addSum(3500)
	if s := h.stats(); s.Count != 1 || s.P50 != 3500 || s.P99 != 3500 || s.Max != 3500 || s.Sum != 3500 {
		t.Errorf("one 3.5 µs latency: %+v, want every figure 3.5µs", s)
	}
	h.add(2100) // [2, 3) µs
	h.add(2200)
	if s := h.stats(); s.P50 != 3*time.Microsecond || s.P99 != 3500 {
		t.Errorf("2.1, 2.2 and 3.5 µs: %+v, want P50 3µs (the bucket [2, 3) µs), P99 3.5µs (Max)", s)
	}
}
