package shaper

import (
	"math"
	"time"
)

// Memory is how long the limiter c describes remembers an idle flow, in
// nanoseconds: after a flow has sent nothing for longer than this, its state
// is the same as a fresh flow's (Reset), so forgetting the flow then gives it
// nothing that keeping it would not. A flow table's timeout (Config.
// FlowTimeout) below it lets an idle flow come back with more than its
// limit: a fresh window or a full bucket early.
//
//   - TokenBucket: Burst / Rate, the time to refill the whole bucket; when
//     shaping, plus MaxDelay (the bucket may be rate × MaxDelay below zero).
//   - FixedWindow and SlidingWindow: Window (a later packet is in a new
//     window, or the log holds nothing it counts).
//   - SlidingWindowCounter: 2 × Window (the previous window's count weighs
//     on the whole current window).
//
// It saturates at math.MaxInt64. c must have its defaults applied
// (Config.LimiterConfig).
func (c LimiterConfig) Memory() int64 {
	var m float64
	switch c.Algorithm {
	case TokenBucket:
		if c.Rate > 0 {
			m = math.Ceil(c.Burst / c.Rate * float64(time.Second))
		}
		m += float64(c.MaxDelay)
	case FixedWindow, SlidingWindow:
		m = float64(c.Window)
	case SlidingWindowCounter:
		m = 2 * float64(c.Window)
	}
	if !(m < math.MaxInt64) { // also NaN
		return math.MaxInt64
	}
	return int64(m)
}

// MemoryWhat names what Memory is made of for c's algorithm, for messages:
// "burst / rate", "window".
func (c LimiterConfig) MemoryWhat() string {
	switch c.Algorithm {
	case TokenBucket:
		if c.MaxDelay > 0 {
			return "burst / rate + max-delay: the time to refill the whole bucket from its deepest queue"
		}
		return "burst / rate: the time to refill the whole bucket"
	case SlidingWindowCounter:
		return "2 × window: the previous window's count weighs on the next"
	}
	return "the window"
}
