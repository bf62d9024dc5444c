package shaper

import "testing"

// TestDelayHistogramBounds: delays fold into the bounds they are known to be at
// most, and every delay is in the count.
func TestDelayHistogramBounds(t *testing.T) {
	e := &Engine{delays: newDelayHist()}
	for _, v := range []int64{0, 100, 127, 1000, 1_000_000, 5_000_000_000} {
		e.delays.Add(v)
	}
	count, sum, cum := e.DelayHistogram([]int64{99, 127, 2000, 2_000_000, 10_000_000_000})
	if count != 6 || sum != 5_001_001_227 {
		t.Errorf("count %d sum %d", count, sum)
	}
	want := []uint64{1, 3, 4, 5, 6}
	for i := range want {
		if cum[i] != want[i] {
			t.Errorf("cumulative %v, want %v", cum, want)
			break
		}
	}
}
