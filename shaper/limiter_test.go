package shaper

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// t0 is a whole second since the Unix epoch, so windows align on it.
const t0 = int64(1_700_000_000) * int64(time.Second)

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

type step struct {
	t    int64 // offset from t0
	cost int64
	ok   bool
}

// stepLimiter makes c's limiter and a state reset at t0+first, for a step
// table.
func stepLimiter(t *testing.T, c LimiterConfig, first int64) (*Limiter, *State) {
	t.Helper()
	l, err := NewLimiter(c)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	l.Reset(&s, t0+first)
	return l, &s
}

// stepCost is a step's cost: 1 unless given.
func stepCost(c int64) int64 { return max(c, 1) }

func runSteps(t *testing.T, c LimiterConfig, steps []step) {
	t.Helper()
	l, s := stepLimiter(t, c, steps[0].t)
	for i, st := range steps {
		cost := stepCost(st.cost)
		if ok := l.Allow(s, t0+st.t, cost); ok != st.ok {
			t.Errorf("step %d: Allow(t0%+.4fs, %d) = %v, want %v", i, float64(st.t)/1e9, cost, ok, st.ok)
		}
	}
}

func TestTokenBucketSteps(t *testing.T) {
	runSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 10, Burst: 3}, []step{
		{0, 1, true}, {0, 1, true}, {0, 1, true}, // starts full
		{0, 1, false},           // empty
		{50 * ms, 1, false},     // half a token
		{100 * ms, 1, true},     // one token after 100 ms at 10/s
		{100 * ms, 1, false},    //
		{1000 * ms, 1, true},    // 9 tokens refilled, capped at 3
		{1000 * ms, 1, true},    //
		{1000 * ms, 1, true},    //
		{1000 * ms, 1, false},   //
		{500 * ms, 1, false},    // time going backwards grants nothing
		{-3600 * sec, 1, false}, // nor does a huge jump back
		{1099 * ms, 1, false},   // 0.99 token
		{1100 * ms, 1, true},    // one token, counted from 1.0 s, not from the jump back
		{3000 * ms, 4, false},   // a cost above the burst never passes
		{3000 * ms, 3, true},    // the whole burst at once
	})
}

func TestTokenBucketFractionalRate(t *testing.T) {
	// 0.5 packets per second, burst 1: one packet every 2 s.
	runSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 0.5, Burst: 1}, []step{
		{0, 1, true}, {1 * sec, 1, false}, {1999 * ms, 1, false}, {2 * sec, 1, true}, {3 * sec, 1, false}, {4 * sec, 1, true},
	})
}

func TestTokenBucketBytes(t *testing.T) {
	// 1000 bytes/s, burst 1500 bytes.
	runSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 1000, Burst: 1500}, []step{
		{0, 1000, true}, {0, 600, false}, {0, 500, true}, // 1500 spent
		{100 * ms, 100, true}, {100 * ms, 1, false},
		{2 * sec, 1500, true},
	})
}

// TestFixedWindowSeedExample is the example from the seed documents:
// capacity 1 packet per second, one packet every 0.2 s starting just after a
// second boundary: forwarded, dropped ×4, forwarded, dropped ×4, …
func TestFixedWindowSeedExample(t *testing.T) {
	var steps []step
	for i := range 15 {
		steps = append(steps, step{t: 1*ms + int64(i)*200*ms, ok: i%5 == 0})
	}
	runSteps(t, LimiterConfig{Algorithm: FixedWindow, Rate: 1, Window: sec}, steps)
}

func TestFixedWindowSteps(t *testing.T) {
	// 3 per second.
	runSteps(t, LimiterConfig{Algorithm: FixedWindow, Rate: 3, Window: sec}, []step{
		{999 * ms, 1, true}, {999 * ms, 1, true}, {999 * ms, 1, true}, {999 * ms, 1, false},
		{1000 * ms, 1, true}, // a new window at the boundary: 6 in 1 ms
		{1000 * ms, 2, true}, {1500 * ms, 1, false},
		{900 * ms, 1, false}, // back into the previous window: counts in the current one
		{5000 * ms, 1, true}, // windows with no packets in between
	})
	// "5 per 10 s": --pps 0.5 --window 10s.
	runSteps(t, LimiterConfig{Algorithm: FixedWindow, Rate: 0.5, Window: 10 * sec}, []step{
		{0, 1, true}, {1, 1, true}, {2, 1, true}, {3, 1, true}, {4, 1, true}, {9 * sec, 1, false}, {10 * sec, 1, true},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	runSteps(t, LimiterConfig{Algorithm: SlidingWindow, Rate: 3, Window: sec}, []step{
		{0, 1, true}, {100 * ms, 1, true}, {200 * ms, 1, true},
		{500 * ms, 1, false},
		{1000 * ms, 1, false},  // [0, 1 s] is closed: the packet at 0 still counts
		{1000*ms + 1, 1, true}, // now it has left
		{1100 * ms, 1, false},  // 100 ms, 200 ms, 1 s+1ns in [100 ms, 1.1 s]
		{1100*ms + 1, 1, true}, //
		{600 * ms, 1, false},   // time going backwards: clamped to 1.1 s
		{5000 * ms, 1, true}, {5000 * ms, 1, true}, {5000 * ms, 1, true}, {5000 * ms, 1, false},
	})
}

func TestSlidingWindowCounterSteps(t *testing.T) {
	var steps []step
	// Window [0,1 s): 10 accepted at 0.5 s, the 11th dropped.
	for i := range 11 {
		steps = append(steps, step{500 * ms, 1, i < 10})
	}
	// At 1.5 s the previous window weighs 10 × 0.5 = 5: five more fit.
	for i := range 6 {
		steps = append(steps, step{1500 * ms, 1, i < 5})
	}
	// At 1.9 s it weighs 10 × 0.1 = 1: 5 + 1 + 4 = 10.
	for i := range 5 {
		steps = append(steps, step{1900 * ms, 1, i < 4})
	}
	// At 3.2 s the previous window [2 s, 3 s) was empty: a full limit.
	for i := range 11 {
		steps = append(steps, step{3200 * ms, 1, i < 10})
	}
	runSteps(t, LimiterConfig{Algorithm: SlidingWindowCounter, Rate: 10, Window: sec}, steps)
}

func TestNewLimiterErrors(t *testing.T) {
	for _, c := range []LimiterConfig{
		{Algorithm: TokenBucket, Rate: 0, Burst: 1},
		{Algorithm: TokenBucket, Rate: -1, Burst: 1},
		{Algorithm: TokenBucket, Rate: 1, Burst: 0.5},
		{Algorithm: FixedWindow, Rate: 0.5, Window: sec},          // half a packet per window
		{Algorithm: SlidingWindow, Rate: 1e6, Window: sec},        // log over its cap
		{Algorithm: SlidingWindowCounter, Rate: 1, Window: 0},     //
		{Algorithm: Algorithm(9), Rate: 1, Burst: 1, Window: sec}, //
	} {
		if _, err := NewLimiter(c); err == nil {
			t.Errorf("NewLimiter(%+v) succeeded", c)
		}
	}
}

// arrivals makes n random arrival times (sorted, bursts and gaps), with
// random costs up to maxCost.
func arrivals(r *rand.Rand, n int, maxCost int64) ([]int64, []int64) {
	ts := make([]int64, n)
	costs := make([]int64, n)
	now := t0 + r.Int64N(sec)
	for i := range ts {
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(10 * ms)
		case 2:
			now += r.Int64N(300 * ms)
		default:
			now += r.Int64N(3 * sec)
		}
		ts[i] = now
		costs[i] = 1 + r.Int64N(maxCost)
	}
	return ts, costs
}

// maxInWindow returns the most cost accepted in any closed interval
// [t, t+w] (it suffices to start intervals at accepted packets).
func maxInWindow(ts, costs []int64, acc []bool, w int64) int64 {
	var best int64
	for i := range ts {
		if !acc[i] {
			continue
		}
		var sum int64
		for j := i; j < len(ts) && ts[j] <= ts[i]+w; j++ {
			if acc[j] {
				sum += costs[j]
			}
		}
		best = max(best, sum)
	}
	return best
}

// TestProperties: for random arrival sequences, no window ever holds more
// accepted than the algorithm's documented bound.
func TestProperties(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 42))
		rate := float64(1 + r.IntN(50))
		window := (1 + r.Int64N(20)) * 100 * ms
		burst := float64(1 + r.IntN(10))
		maxCost := int64(1)
		if seed%2 == 1 {
			maxCost = 5 // costs as bytes
		}
		ts, costs := arrivals(r, 600, maxCost)
		for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
			if algo == SlidingWindow && maxCost > 1 {
				continue
			}
			c := LimiterConfig{Algorithm: algo, Rate: rate, Burst: max(burst, float64(maxCost)), Window: window}
			l, err := NewLimiter(c)
			if err != nil {
				continue // rate × window below one packet
			}
			var s State
			l.Reset(&s, ts[0])
			acc := make([]bool, len(ts))
			n := 0
			for i := range ts {
				acc[i] = l.Allow(&s, ts[i], costs[i])
				if acc[i] {
					n++
				}
			}
			if n == 0 {
				t.Fatalf("seed %d %v: nothing accepted", seed, algo)
			}
			lim := l.Limit()
			switch algo {
			case TokenBucket:
				// Over any [t, t+w]: at most burst + rate×w.
				for _, w := range []int64{0, 10 * ms, 100 * ms, sec, 10 * sec} {
					bound := c.Burst + rate*float64(w)/1e9
					if got := maxInWindow(ts, costs, acc, w); float64(got) > bound {
						t.Errorf("seed %d token-bucket rate %v burst %v: %d in %v, bound %.3f", seed, rate, c.Burst, got, time.Duration(w), bound)
					}
				}
			case SlidingWindow:
				if got := maxInWindow(ts, costs, acc, window); got > lim {
					t.Errorf("seed %d sliding-window: %d in a closed %v window, limit %d", seed, got, time.Duration(window), lim)
				}
			case FixedWindow, SlidingWindowCounter:
				per := map[int64]int64{}
				for i := range ts {
					if acc[i] {
						per[floorDiv(ts[i], window)] += costs[i]
					}
				}
				for w, got := range per {
					if got > lim {
						t.Errorf("seed %d %v: %d in aligned window %d, limit %d", seed, algo, got, w, lim)
					}
				}
				if got := maxInWindow(ts, costs, acc, window-1); got > 2*lim {
					t.Errorf("seed %d %v: %d in a sliding %v, bound 2×%d", seed, algo, got, time.Duration(window), lim)
				}
			}
		}
	}
}

// TestTimeBackwardsNeverGrants: for every algorithm, a sequence with jumps
// back in time accepts exactly what the same sequence accepts with each
// time replaced by the newest seen so far, so going back grants nothing.
func TestTimeBackwardsNeverGrants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	ts := make([]int64, 2000)
	now := t0
	for i := range ts {
		now += r.Int64N(100 * ms)
		ts[i] = now
		if r.IntN(5) == 0 {
			ts[i] = now - r.Int64N(10*sec) // a packet from the past
		}
	}
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		l, err := NewLimiter(LimiterConfig{Algorithm: algo, Rate: 5, Burst: 3, Window: sec})
		if err != nil {
			t.Fatal(err)
		}
		var a, b State
		l.Reset(&a, ts[0])
		l.Reset(&b, ts[0])
		newest := ts[0]
		for i, tt := range ts {
			newest = max(newest, tt)
			if got, want := l.Allow(&a, tt, 1), l.Allow(&b, newest, 1); got != want {
				t.Fatalf("%v step %d: Allow(%d) = %v, with clamped time %v", algo, i, tt-t0, got, want)
			}
		}
	}
}

// TestLeftSteps walks each algorithm through steps, checking Left after
// each: what is left of the burst or the window's limit.
func TestLeftSteps(t *testing.T) {
	type lstep struct {
		t     int64 // offset from t0
		allow int64 // cost to Allow first (0: none)
		left  float64
	}
	for _, tc := range []struct {
		c     LimiterConfig
		steps []lstep
	}{
		{LimiterConfig{Algorithm: TokenBucket, Rate: 10, Burst: 3}, []lstep{
			{0, 0, 3}, {0, 1, 2}, {0, 2, 0}, {50 * ms, 0, 0.5}, {-sec, 0, 0} /* clamped to the last Allow */, {100 * ms, 1, 0}, {10 * sec, 0, 3},
		}},
		{LimiterConfig{Algorithm: FixedWindow, Rate: 3, Window: sec}, []lstep{
			{0, 0, 3}, {0, 2, 1}, {999 * ms, 1, 0}, {1000 * ms, 0, 3}, {1000 * ms, 1, 2},
		}},
		{LimiterConfig{Algorithm: SlidingWindow, Rate: 3, Window: sec}, []lstep{
			{0, 1, 2}, {100 * ms, 1, 1}, {200 * ms, 1, 0}, {1000 * ms, 0, 0}, {1000*ms + 1, 0, 1},
			{1100*ms + 1, 0, 2}, {1200*ms + 1, 0, 3}, {1200*ms + 1, 1, 2},
		}},
		{LimiterConfig{Algorithm: SlidingWindowCounter, Rate: 10, Window: sec}, []lstep{
			{500 * ms, 4, 6}, {500 * ms, 6, 0},
			{1500 * ms, 0, 5},   // the previous window weighs 10 × 0.5
			{1900 * ms, 0, 9},   // 10 × 0.1
			{1900 * ms, 3, 6},   //
			{2500 * ms, 0, 8.5}, // 3 × 0.5
			{4000 * ms, 0, 10},  // an empty window between: nothing weighs
		}},
	} {
		l, err := NewLimiter(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		var s State
		l.Reset(&s, t0+tc.steps[0].t)
		if got := l.Left(&s, t0+tc.steps[0].t); got != l.Capacity() {
			t.Errorf("%v: fresh Left = %v, want Capacity %v", tc.c.Algorithm, got, l.Capacity())
		}
		for i, st := range tc.steps {
			if st.allow > 0 && !l.Allow(&s, t0+st.t, st.allow) {
				t.Fatalf("%v step %d: Allow(t0%+.4fs, %d) refused", tc.c.Algorithm, i, float64(st.t)/1e9, st.allow)
			}
			if got := l.Left(&s, t0+st.t); math.Abs(got-st.left) > 1e-9 {
				t.Errorf("%v step %d: Left(t0%+.4fs) = %v, want %v", tc.c.Algorithm, i, float64(st.t)/1e9, got, st.left)
			}
		}
	}
}

// TestLeftAgreesWithAllow: at every step of random arrivals, a packet of
// cost c is accepted iff c <= Left (away from ties of float rounding),
// and Left changes nothing.
func TestLeftAgreesWithAllow(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 9))
		ts, costs := arrivals(r, 400, 1+int64(seed%2)*4)
		for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
			if algo == SlidingWindow && seed%2 == 1 {
				continue
			}
			l, err := NewLimiter(LimiterConfig{Algorithm: algo, Rate: float64(1 + r.IntN(20)), Burst: 5, Window: (1 + r.Int64N(20)) * 100 * ms})
			if err != nil {
				continue
			}
			var s State
			l.Reset(&s, ts[0])
			for i := range ts {
				left := l.Left(&s, ts[i])
				before := s
				before.log = slices.Clone(s.log)
				if left < 0 || left > l.Capacity() {
					t.Fatalf("seed %d %v step %d: Left = %v, outside [0, %v]", seed, algo, i, left, l.Capacity())
				}
				if again := l.Left(&s, ts[i]); again != left || !reflect.DeepEqual(before, s) {
					t.Fatalf("seed %d %v step %d: Left changed the state", seed, algo, i)
				}
				ok := l.Allow(&s, ts[i], costs[i])
				if math.Abs(left-float64(costs[i])) > 1e-6 && ok != (float64(costs[i]) <= left) {
					t.Fatalf("seed %d %v step %d: Allow(cost %d) = %v with Left %v", seed, algo, i, costs[i], ok, left)
				}
			}
		}
	}
}

func TestLimiterNoAllocs(t *testing.T) {
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		l, _ := NewLimiter(LimiterConfig{Algorithm: algo, Rate: 100, Burst: 5, Window: sec})
		var s State
		l.Reset(&s, t0)
		now := t0
		if n := testing.AllocsPerRun(1000, func() {
			now += ms
			l.Allow(&s, now, 1)
		}); n != 0 {
			t.Errorf("%v: %v allocs per Allow", algo, n)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAlgorithm("leaky-bucket"); err == nil {
		t.Error("ParseAlgorithm(leaky-bucket) succeeded")
	}
}

// TestResetSpent: a state reset spent admits nothing at once, whatever the
// algorithm, and then what the rate earns: one packet a second here.
func TestResetSpent(t *testing.T) {
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		lim, err := NewLimiter(LimiterConfig{Algorithm: algo, Rate: 1, Burst: 5, Window: 1e9})
		if err != nil {
			t.Fatalf("%v: %v", algo, err)
		}
		var s State
		const now = int64(1e12)
		lim.ResetSpent(&s, now)
		if lim.Allow(&s, now, 1) {
			t.Errorf("%v: a spent state admitted a packet at once", algo)
		}
		// Two windows on (the sliding-window counter weighs the previous
		// one): a packet again, but not a burst.
		later := now + 2e9 + 1
		n := 0
		for range 10 {
			if lim.Allow(&s, later, 1) {
				n++
			}
		}
		if n == 0 || n > 2 {
			t.Errorf("%v: %d packets admitted 2 s after a spent reset, want 1 or 2 (what 2 s earn, not a burst)", algo, n)
		}
	}
}
