package testutil

// ExactTokenBucket is how many packets at times ns (nanoseconds, in order)
// an exact token bucket accepts: capacity burst packets, full at the first
// packet, refilled at rate packets/s. Integer arithmetic in billionths of
// a packet: nothing is lost to rounding. It is the tests' oracle, apart
// from the shaper's and the fast path's arithmetic.
func ExactTokenBucket(ns []int64, burst, rate int64) int {
	const unit = 1_000_000_000 // a packet
	capacity := burst * unit
	tokens, n := capacity, 0
	for i, t := range ns {
		if i > 0 {
			// rate packets/s = rate billionths of a packet per ns.
			tokens = min(capacity, tokens+rate*(t-ns[i-1]))
		}
		if tokens >= unit {
			tokens -= unit
			n++
		}
	}
	return n
}
