package shaper

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestTokenBucketTinyRefills is issue 13's defect: when rate × the gap
// between calls is below one nano-unit, each call floored its refill to 0
// and still moved the bucket's time on, so the bucket never refilled. With
// the fraction carried, a million calls refill exactly what is due.
func TestTokenBucketTinyRefills(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  float64
		gap   int64 // ns between calls
		calls int64
		due   int64 // nano-units due, ≈ rate × gap × calls
	}{
		{"--pps 1e-5, live, 50 µs apart", 1e-5, 50 * us, 1_000_000, 500_000},
		{"--pps 0.5, replay, 1 ns apart", 0.5, 1, 1_000_000, 500_000},
		{"--pps 1e-6, 1 µs apart", 1e-6, us, 1_000_000, 1_000},
		{"--pps 1.5, 1 ns apart", 1.5, 1, 1_000_000, 1_500_000},
		{"--bitrate 1bit, 1 ns apart", 1.0 / 8, 1, 1_000_000, 125_000},
	} {
		l, err := NewLimiter(LimiterConfig{Algorithm: TokenBucket, Rate: tc.rate, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		var s State
		l.Reset(&s, t0)
		if !l.Allow(&s, t0, 1) {
			t.Fatalf("%s: the full bucket refused", tc.name)
		}
		now := t0
		for i := int64(0); i < tc.calls; i++ {
			now += tc.gap
			if l.Allow(&s, now, 1) {
				t.Fatalf("%s: call %d accepted with %d nano-units in the bucket", tc.name, i, s.tokens)
			}
		}
		// Exactly ⌊rate × elapsed⌋ nano-units, rate being the float64's value.
		want := new(big.Rat).Mul(new(big.Rat).SetFloat64(tc.rate), new(big.Rat).SetInt64(now-t0))
		wantN := new(big.Int).Quo(want.Num(), want.Denom()).Int64()
		if s.tokens != wantN || math.Abs(float64(s.tokens-tc.due)) > 1 {
			t.Errorf("%s: %d calls refilled %d nano-units, want ⌊rate × %d ns⌋ = %d (≈ %d due)", tc.name, tc.calls, s.tokens, now-t0, wantN, tc.due)
		}
		if got := l.Left(&s, now); got != float64(wantN)/nano {
			t.Errorf("%s: Left = %v, want %v", tc.name, got, float64(wantN)/nano)
		}
	}
}

// TestDepartTinyRefills: the same defect in the shaping bucket. At 0.5
// packets/s a packet that finds the bucket empty departs 2 s after the one
// before, however many calls in between found it short.
func TestDepartTinyRefills(t *testing.T) {
	l, err := NewLimiter(LimiterConfig{Algorithm: TokenBucket, Rate: 0.5, Burst: 1, MaxDelay: 5 * sec})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	l.Reset(&s, t0)
	if dep, ok := l.Depart(&s, t0, 1, true); !ok || dep != t0 {
		t.Fatalf("first packet: %d, %v", dep-t0, ok)
	}
	now := t0
	for i := 0; i < 1_000_000; i++ {
		now++
		if _, ok := l.Depart(&s, now, 1, false); ok {
			t.Fatalf("call %d: conformed at t0%+d", i, now-t0)
		}
	}
	if dep, ok := l.Depart(&s, now, 1, true); !ok || dep != t0+2*sec {
		t.Errorf("after 1e6 calls 1 ns apart: departs at t0%+d (%v), want t0+2s", dep-t0, ok)
	}
}

// TestSlidingWindowCounterExactWeight: the previous window's weight,
// prev × left / window, is compared exactly. Here it is 500 + 10⁻¹⁵, which a
// float64 rounds to 500: with a limit of 1000 the float comparison let
// 1000 − 500 = 500 packets through where the documented rule allows 499.
func TestSlidingWindowCounterExactWeight(t *testing.T) {
	const window = 1_000_000_000 * sec // 1e18 ns; --pps 1e-6: a limit of 1000
	var steps []step
	// t0 is in window 1 ([1e18, 2e18) ns); window 2 starts at t0 + 3e17.
	for i := 0; i < 1001; i++ {
		steps = append(steps, step{0, 1, i < 1000})
	}
	at := int64(2e18+5e17-1) - t0 // left = 5e17 + 1 ns of window 2
	for i := 0; i < 501; i++ {
		steps = append(steps, step{at, 1, i < 499})
	}
	runSteps(t, LimiterConfig{Algorithm: SlidingWindowCounter, Rate: 1e-6, Window: window}, steps)
}

// exactBucket is the token bucket in rational arithmetic: tokens in
// nano-units, rate the float64's exact value in nano-units per ns, the
// same capacity as the Limiter's (Burst × 1e9, floored). It is the
// reference for the Limiter's refill and departures.
type exactBucket struct {
	tokens, rate, cap, maxDelay *big.Rat
	last                        int64
}

func newExactBucket(l *Limiter, now int64) *exactBucket {
	return &exactBucket{
		tokens:   new(big.Rat).SetInt64(l.burstN),
		cap:      new(big.Rat).SetInt64(l.burstN),
		rate:     new(big.Rat).SetFloat64(l.rate),
		maxDelay: new(big.Rat).SetInt64(l.maxDelay),
		last:     now,
	}
}

// at refills the bucket to now (clamped to the newest time seen).
func (b *exactBucket) at(now int64) int64 {
	if now <= b.last {
		return b.last
	}
	add := new(big.Rat).Mul(b.rate, new(big.Rat).SetInt(new(big.Int).Sub(big.NewInt(now), big.NewInt(b.last))))
	b.tokens.Add(b.tokens, add)
	if b.tokens.Cmp(b.cap) > 0 {
		b.tokens.Set(b.cap)
	}
	b.last = now
	return now
}

func (b *exactBucket) allow(now, cost int64) bool {
	b.at(now)
	c := new(big.Rat).SetInt64(cost * nano)
	if b.tokens.Cmp(c) < 0 {
		return false
	}
	b.tokens.Sub(b.tokens, c)
	return true
}

// depart returns the rational departure time (nil: dropped).
func (b *exactBucket) depart(now, cost int64, hold bool) *big.Rat {
	now = b.at(now)
	c := new(big.Rat).SetInt64(cost * nano)
	if b.tokens.Cmp(c) >= 0 {
		b.tokens.Sub(b.tokens, c)
		return new(big.Rat).SetInt64(now)
	}
	if !hold {
		return nil
	}
	wait := new(big.Rat).Sub(c, b.tokens)
	wait.Quo(wait, b.rate)
	if wait.Cmp(b.maxDelay) > 0 {
		return nil
	}
	b.tokens.Sub(b.tokens, c)
	return wait.Add(wait, new(big.Rat).SetInt64(now))
}

// exactRates are rates the flags accept at and beyond the property test's
// range: --pps takes any positive float64, --bitrate up to 1e15 bytes/s.
var exactRates = []float64{
	math.SmallestNonzeroFloat64, 1e-300, 1e-20, 0x1p-64, 0x1.8p-64, 0x1p-76 * 1.1, 1e-12,
	1e-6, 1.0 / 3, 0.1, 0.5, 1, 1.5, 2.0 / 3 * 1e9, 1e9, 1e12 / 8, 1e15, 1e300,
}

// scaledArrivals makes n arrival times for a flow at rate (cost units per
// second) with costs up to maxCost: at the same instant, 1 ns apart, up to
// the time one packet's cost takes, up to a hundred times that (long
// gaps), and one in ten from the past (time going backwards); gaps at
// most 1e16 ns, so that times stay within int64.
func scaledArrivals(r *rand.Rand, n int, rate float64, maxCost int64) ([]int64, []int64) {
	ts := make([]int64, n)
	costs := make([]int64, n)
	per := float64(maxCost+1) / 2 / rate * 1e9 // ns a mean packet takes
	gap := func(f float64) int64 { return int64(min(per*f, 1e16)) }
	now := t0 + r.Int64N(sec)
	for i := range ts {
		costs[i] = 1 + r.Int64N(maxCost)
		switch r.IntN(10) {
		case 0, 1: // same instant
		case 2:
			now++
		case 3, 4, 5:
			now += gap(math.Pow(10, -6*r.Float64()))
		case 6, 7:
			now += gap(math.Pow(10, 2*r.Float64()))
		case 8:
			now += r.Int64N(1000)
		case 9:
			ts[i] = now - 1 - gap(r.Float64()) // from the past
			continue
		}
		ts[i] = now
	}
	return ts, costs
}

// limiterCase is a random token bucket: a rate log-uniform between 1e-6
// packets/s and 1e9 bytes/s, with byte costs (up to 1500) half the time.
func limiterCase(r *rand.Rand, rate float64) (LimiterConfig, int64) {
	if rate == 0 {
		rate = math.Pow(10, -6+15*r.Float64())
	}
	maxCost := int64(1)
	c := LimiterConfig{Algorithm: TokenBucket, Rate: rate, Burst: float64(1+r.IntN(8)) * []float64{1, 1.5, 0.25 + 1}[r.IntN(3)]}
	if r.IntN(2) == 0 {
		maxCost = 1500
		c.Burst = float64(1500 + r.IntN(20000))
	}
	return c, maxCost
}

// TestTokenBucketExact: for random arrivals (bursts, 1 ns gaps, long
// gaps, equal times, time going backwards) at rates log-uniform from 1e-6
// packets/s to 1e9 bytes/s and at the extremes the flags accept, Allow
// decides every packet as the rational token bucket does. So what it
// accepts is at least what the exact bucket accepts (not one packet
// less), and over any interval [a, b] between accepted packets at most
// burst + rate × (b − a).
func TestTokenBucketExact(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 2))
	rates := append(make([]float64, 200), exactRates...)
	var accepted, refused int
	defer func() { t.Logf("%d accepted, %d refused", accepted, refused) }()
	for iter, rate := range rates {
		c, maxCost := limiterCase(r, rate)
		l, err := NewLimiter(c)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		ts, costs := scaledArrivals(r, 300, c.Rate, maxCost)
		var s State
		l.Reset(&s, ts[0])
		x := newExactBucket(l, ts[0])
		var accT, accC []int64 // accepted packets' (clamped) times and costs
		var got, want, differ int
		newest := ts[0]
		for i, now := range ts {
			newest = max(newest, now)
			ok := l.Allow(&s, now, costs[i])
			xok := x.allow(now, costs[i])
			if ok {
				got++
				accT, accC = append(accT, newest), append(accC, costs[i])
			}
			if xok {
				want++
			}
			if ok != xok {
				differ++
				if differ == 1 {
					t.Errorf("iter %d rate %g burst %v: packet %d (t0%+d, cost %d): Allow %v, the exact bucket %v (%s nano-units)",
						iter, c.Rate, c.Burst, i, now-t0, costs[i], ok, xok, x.tokens.FloatString(3))
				}
			}
			// The bucket holds the floor of the exact bucket.
			if fl := new(big.Int).Quo(x.tokens.Num(), x.tokens.Denom()); fl.Cmp(big.NewInt(s.tokens)) != 0 && differ == 0 {
				t.Fatalf("iter %d rate %g: packet %d: %d nano-units, the exact bucket %s", iter, c.Rate, i, s.tokens, x.tokens.FloatString(3))
			}
		}
		accepted, refused = accepted+got, refused+len(ts)-got
		if got < want-1 {
			t.Errorf("iter %d rate %g: accepted %d, the exact bucket %d", iter, c.Rate, got, want)
		}
		for a := range accT {
			var sum int64
			for b := a; b < len(accT); b++ {
				sum += accC[b]
				if bound := c.Burst + c.Rate*float64(accT[b]-accT[a])/1e9; float64(sum) > bound*(1+1e-12) {
					t.Fatalf("iter %d rate %g burst %v: %d accepted in [t0%+d, t0%+d], over burst + rate × T = %.6g", iter, c.Rate, c.Burst, sum, accT[a]-t0, accT[b]-t0, bound)
				}
			}
		}
	}
}

// TestDepartExact: the shaping bucket's departures against the rational
// one's, for the same arrivals and rates: the same packets held and
// dropped, and each departure the exact one rounded up to the nanosecond
// (never earlier, less than 1 ns later).
func TestDepartExact(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 3))
	rates := append(make([]float64, 200), exactRates...)
	one := big.NewRat(1, 1)
	var now0, held, dropped int
	defer func() { t.Logf("%d at once, %d held, %d dropped", now0, held, dropped) }()
	for iter, rate := range rates {
		c, maxCost := limiterCase(r, rate)
		c.MaxDelay = 1 + r.Int64N(MaxMaxDelay)
		if q := c.Rate * float64(c.MaxDelay) / 1e9; q > MaxBurst {
			c.MaxDelay = max(1, int64(MaxBurst/c.Rate*1e9))
		}
		l, err := NewLimiter(c)
		if err != nil {
			continue // rate × 1 ns over MaxBurst: no queue fits
		}
		ts, costs := scaledArrivals(r, 300, c.Rate, maxCost)
		var s State
		l.Reset(&s, ts[0])
		x := newExactBucket(l, ts[0])
		for i, now := range ts {
			hold := r.IntN(8) != 0
			dep, ok := l.Depart(&s, now, costs[i], hold)
			xdep := x.depart(now, costs[i], hold)
			if ok != (xdep != nil) {
				t.Fatalf("iter %d rate %g burst %v max delay %d: packet %d (t0%+d, cost %d, hold %v): Depart %v, the exact bucket %v",
					iter, c.Rate, c.Burst, c.MaxDelay, i, now-t0, costs[i], hold, ok, xdep != nil)
			}
			switch {
			case !ok:
				dropped++
				continue
			case dep == s.last && xdep.Cmp(new(big.Rat).SetInt64(dep)) == 0:
				now0++
			default:
				held++
			}
			d := new(big.Rat).Sub(new(big.Rat).SetInt64(dep), xdep)
			if d.Sign() < 0 || d.Cmp(one) >= 0 {
				t.Fatalf("iter %d rate %g: packet %d departs at %d, the exact departure %s: %s ns later, want [0, 1)", iter, c.Rate, i, dep, xdep.FloatString(3), d.FloatString(3))
			}
		}
	}
}

// TestExactRate: the fixed-point rate is the float64's exact value.
func TestExactRate(t *testing.T) {
	two128 := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 128))
	for _, rate := range append(exactRates, 1e-5, 0.3, 12345.678, 1<<61+1<<9, 0x1p-75, 0x1p-76) {
		if rate >= 1<<62 {
			continue
		}
		w, hi, lo := exactRate(rate)
		frac := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		frac.Or(frac, new(big.Int).SetUint64(lo))
		got := new(big.Rat).SetFrac(frac, big.NewInt(1))
		got.Quo(got, two128)
		got.Add(got, new(big.Rat).SetUint64(w))
		want := new(big.Rat).SetFloat64(rate)
		if rate >= 0x1p-76 && got.Cmp(want) != 0 {
			t.Errorf("exactRate(%g) = %s, want %s", rate, got.FloatString(40), want.FloatString(40))
		}
		if got.Cmp(want) > 0 {
			t.Errorf("exactRate(%g) = %s, above the rate", rate, got.FloatString(40))
		}
	}
}
