package testutil

import (
	"testing"
	"time"
)

func TestExactTokenBucket(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		ns          []int64
		burst, rate int64
		want        int
	}{
		{[]int64{0, 0, 0, 0}, 3, 1, 3},
		{[]int64{0, 0, 1000 * ms, 1000 * ms}, 1, 1, 2},
		{[]int64{0, 0, 999 * ms}, 1, 1, 1},
		// 2 → 1, +0.5 → 0.5, +0.5 → 0, 0.5 (dropped), +0.5 → 0.
		{[]int64{0, 10 * ms, 20 * ms, 30 * ms, 40 * ms}, 2, 50, 4},
	} {
		if got := ExactTokenBucket(tc.ns, tc.burst, tc.rate); got != tc.want {
			t.Errorf("ExactTokenBucket(%v, %d, %d) = %d, want %d", tc.ns, tc.burst, tc.rate, got, tc.want)
		}
	}
}
