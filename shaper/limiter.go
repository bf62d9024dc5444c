// Package shaper decides ACCEPT or DROP for each packet: it decodes the
// packet and keys it into a flow (package flows), then runs that flow's
// limiter. Time is always an argument: now is nanoseconds since the Unix
// epoch, read by the caller (the live path reads its clock once per batch of
// packets; replay passes capture timestamps). Nothing in this package reads
// a clock.
package shaper

import (
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Algorithm selects a limiter.
type Algorithm uint8

const (
	// TokenBucket: a bucket of capacity Burst starts full and refills
	// continuously at Rate per second. A packet is accepted iff the bucket
	// holds its cost, which is then taken. Over any interval of length T,
	// a flow gets at most Burst + Rate×T accepted.
	TokenBucket Algorithm = iota
	// FixedWindow: time is cut into windows of length Window aligned to
	// multiples of Window since the Unix epoch (so live and replay align
	// the same way); at most Limit = Rate×Window is accepted per window,
	// and the count starts from zero in each window. Any interval of length
	// Window can hold up to 2×Limit (the end of one window and the start of
	// the next).
	FixedWindow
	// SlidingWindow is the exact sliding-window log: a packet is accepted
	// iff fewer than Limit packets of its flow were accepted in the closed
	// interval [now−Window, now]. No interval of length Window ever holds
	// more than Limit accepted packets. It keeps one timestamp per accepted
	// packet in the window (Limit×8 bytes per flow), so it counts packets
	// only (no --bitrate) and Limit is capped at MaxLogLimit.
	SlidingWindow
	// SlidingWindowCounter is the O(1)-memory approximation of the sliding
	// window: with windows aligned as in FixedWindow, a packet is accepted
	// iff prev×(Window−elapsed)/Window + cur + cost <= Limit, where prev is
	// what the previous window accepted, cur what the current one has
	// accepted so far and elapsed how far now is into the current window.
	// The comparison is exact (prev×(Window−elapsed) <= (Limit−cur−cost)×
	// Window in 128-bit integers), not rounded at large windows or counts.
	// Each aligned window accepts at most Limit, so any interval of length
	// Window holds at most 2×Limit (in practice close to Limit).
	SlidingWindowCounter
)

var algoNames = [...]string{
	TokenBucket:          "token-bucket",
	FixedWindow:          "fixed-window",
	SlidingWindow:        "sliding-window",
	SlidingWindowCounter: "sliding-window-counter",
}

func (a Algorithm) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm parses an algorithm's name as String writes it.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, n := range algoNames {
		if s == n {
			return Algorithm(a), nil
		}
	}
	return 0, configErr(about(SettingAlgorithm), "unknown algorithm %q (want token-bucket, fixed-window, sliding-window or sliding-window-counter)", s)
}

// MaxLogLimit caps the sliding-window log's Limit: it stores a timestamp per
// accepted packet in the window, for every flow.
const MaxLogLimit = 1 << 16

// nano is the fixed-point scale of token counts: the token bucket counts
// billionths of a packet (or byte) in an int64, and keeps what its refill
// has earned below one nano-unit as a 128-bit fraction (see State), so
// refill is exact: the bucket holds the floor of what a token bucket in
// rational arithmetic at the same rate (the float64's exact value, in
// nano-units per nanosecond) and capacity (Burst × 1e9, floored) holds,
// and so decides every packet as it does, at every rate.
const nano = 1e9

// Limiter is one algorithm with its parameters. It holds no per-flow state:
// that lives in a State per flow. The zero Limiter is not usable; make one
// with NewLimiter. A Limiter is immutable and safe for concurrent use; each
// State belongs to one goroutine.
type Limiter struct {
	algo   Algorithm
	burstN int64 // token bucket capacity in nano-units
	// The rate in nano-units per nanosecond (numerically the rate per
	// second) as fixed point: rateInt whole nano-units and rateHi:rateLo
	// a fraction of one in units of 2⁻¹²⁸ (high and low words), exact for
	// every float64 rate ≥ 2⁻⁶⁴ and so for every rate the refill can ever
	// tell from its exact value (see exactRate). The token bucket's refill
	// is integer arithmetic on these (see grow).
	rateInt        uint64
	rateHi, rateLo uint64
	rate           float64 // cost units per second
	window         int64   // ns
	limit          int64   // per window, in cost units
	// maxDelay (ns) is how long a shaping token bucket may hold a packet;
	// 0 for a limiter that does not shape.
	maxDelay int64
}

// State is one flow's limiter state. The zero State is not valid: Reset it
// when the flow starts.
type State struct {
	// last is the newest time this flow has seen: time going backwards is
	// clamped to it, so it never grants anything.
	last int64
	// tokens (token bucket), in nano-units.
	tokens int64
	// win is the index of the current window (now/window), cur and prev
	// what the current and previous windows accepted. The token bucket
	// has no windows: win:cur (high:low words, as uint64) is the fraction
	// of a nano-unit its refill has earned and not yet added to tokens, in
	// units of 2⁻¹²⁸, so that no refill is lost to rounding (State stays
	// 72 bytes; flows' TestFlowStateSize). A token bucket that shapes
	// under a total keeps its key's fair tag in prev and the epochs it
	// was last counted in in head and n (fair.go).
	win       int64
	cur, prev int64
	// log is the sliding-window log: a ring of accepted timestamps,
	// oldest at head. Its buffer is kept across Reset.
	log     []int64
	head, n int32
}

// LimiterConfig gives an algorithm's parameters.
type LimiterConfig struct {
	Algorithm Algorithm
	// Rate is in cost units per second: packets, or bytes when costs are
	// packet lengths. Must be > 0; fractions are allowed (0.5 with a 10 s
	// window is "5 per 10 s").
	Rate float64
	// Burst is the token bucket's capacity in cost units (>= 1).
	Burst float64
	// Window is the window length in nanoseconds for the window algorithms.
	Window int64
	// MaxDelay, if above 0, makes a TokenBucket shape (see Depart): a
	// packet that would conform within MaxDelay nanoseconds is held until
	// then instead of dropped. At most MaxMaxDelay; rate × MaxDelay at
	// most MaxBurst. Only for TokenBucket.
	MaxDelay int64
}

// MaxMaxDelay bounds LimiterConfig.MaxDelay: a held packet waits in the
// kernel's queue, and a transport waiting longer than this for it would
// long have given it up.
const MaxMaxDelay = int64(10 * time.Second)

// NewLimiter checks c and returns its Limiter.
func NewLimiter(c LimiterConfig) (*Limiter, error) {
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		return nil, configErr(about(SettingRate), "rate must be a positive number, not %v", c.Rate)
	}
	l := &Limiter{algo: c.Algorithm, rate: c.Rate, window: c.Window}
	l.rateInt, l.rateHi, l.rateLo = exactRate(c.Rate)
	switch c.Algorithm {
	case TokenBucket:
		if !(c.Burst >= 1) || c.Burst > MaxBurst {
			return nil, configErr(about(SettingBurst), "burst must be between 1 and %g, not %v", float64(MaxBurst), c.Burst)
		}
		l.burstN = int64(c.Burst * nano)
		if c.MaxDelay != 0 {
			if c.MaxDelay < 0 || c.MaxDelay > MaxMaxDelay {
				return nil, configErr(about(SettingMaxDelay), "max delay must be above 0 and at most %v, not %v", time.Duration(MaxMaxDelay), time.Duration(c.MaxDelay))
			}
			if q := c.Rate * float64(c.MaxDelay) / 1e9; q > MaxBurst {
				return nil, configErr(about(SettingMaxDelay, SettingShape, SettingAlgorithm), "rate × max delay is %g, a queue above %g: lower the max delay", q, float64(MaxBurst))
			}
			l.maxDelay = c.MaxDelay
		}
	case FixedWindow, SlidingWindow, SlidingWindowCounter:
		if c.Window <= 0 {
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "%v needs a positive window, not %dns", c.Algorithm, c.Window)
		}
		if c.MaxDelay != 0 {
			return nil, configErr(about(SettingShape, SettingAlgorithm), "only the token bucket shapes (holds packets), not %v", c.Algorithm)
		}
		lim := math.Floor(c.Rate*float64(c.Window)/1e9 + 1e-9)
		if lim < 1 {
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "rate %v/s over a %v s window allows less than one packet per window; raise the rate or the window", c.Rate, float64(c.Window)/1e9)
		}
		if lim > 1<<53 {
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "rate × window is too large")
		}
		l.limit = int64(lim)
		if c.Algorithm == SlidingWindow && l.limit > MaxLogLimit {
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "sliding-window keeps one timestamp per packet, and a limit of %d per window is over its cap of %d; use sliding-window-counter", l.limit, MaxLogLimit)
		}
	default:
		return nil, configErr(about(SettingAlgorithm), "unknown algorithm %d", c.Algorithm)
	}
	return l, nil
}

// Limit is the per-window limit of the window algorithms (0 for the token
// bucket).
func (l *Limiter) Limit() int64 { return l.limit }

// MaxDelay is how long a shaping limiter holds a packet at most (ns), 0
// for one that does not shape.
func (l *Limiter) MaxDelay() int64 { return l.maxDelay }

// Rate is the rate, in cost units per second.
func (l *Limiter) Rate() float64 { return l.rate }

// Fixed is the limiter's integers, for another implementation of the same
// arithmetic (the kernel's fast path): the token bucket's capacity in
// nano-units and the rate in nano-units per nanosecond as fixed point,
// rateInt whole and rateHi:rateLo a fraction in units of 2⁻¹²⁸ (see
// exactRate). The window algorithms' window and limit are
// LimiterConfig.Window and Limit.
func (l *Limiter) Fixed() (burstN int64, rateInt, rateHi, rateLo uint64) {
	return l.burstN, l.rateInt, l.rateHi, l.rateLo
}

// Reset makes s the state of a flow that starts at now: a full bucket, empty
// windows, an empty log.
func (l *Limiter) Reset(s *State, now int64) {
	*s = State{last: now, tokens: l.burstN, win: floorDiv(now, l.window), log: s.log}
	if l.algo == SlidingWindow {
		// The log's buffer outlives the flow: a table slot reused by
		// another flow reuses it, so only a new slot allocates.
		if int64(cap(s.log)) < l.limit {
			s.log = make([]int64, l.limit)
		}
		s.log = s.log[:l.limit]
	}
}

// ResetSpent makes s the state of a flow that starts at now with nothing
// left to spend: an empty bucket, the current window full, a full log. It
// then gets only what the rate earns from now on. (A global rule's local
// fallback starts so: what its leases spent is not known to it.)
func (l *Limiter) ResetSpent(s *State, now int64) {
	l.Reset(s, now)
	switch l.algo {
	case TokenBucket:
		s.tokens = 0
	case FixedWindow, SlidingWindowCounter:
		s.cur = l.limit
	case SlidingWindow:
		for i := range s.log {
			s.log[i] = now
		}
		s.head, s.n = 0, int32(l.limit)
	}
}

// Allow reports whether a packet of the given cost (1 for a packet, or its
// length in bytes) is accepted at now, and if so charges it to s. Only
// accepted packets are charged. A now older than the newest time s has seen
// is taken as that newest time. It does not allocate.
func (l *Limiter) Allow(s *State, now int64, cost int64) bool {
	if now < s.last {
		now = s.last
	}
	switch l.algo {
	case TokenBucket:
		// refill, written out: the call was ~15 % of Allow's time (0.8 of
		// 5.6 ns in BenchmarkLimiterAllow); 1.7 ns above the float refill
		// it replaced, within the noise of BenchmarkDecide.
		if elapsed := uint64(now) - uint64(s.last); elapsed != 0 {
			s.last = now
			h1, l1 := bits.Mul64(elapsed, l.rateLo)
			h2, l2 := bits.Mul64(elapsed, l.rateHi)
			lo, c := bits.Add64(l1, uint64(s.cur), 0)
			hi, c1 := bits.Add64(l2, h1, c)
			hi, c2 := bits.Add64(hi, uint64(s.win), 0)
			ih, il := bits.Mul64(elapsed, l.rateInt)
			add, c3 := bits.Add64(h2+c1+c2, il, 0)
			if space := uint64(l.burstN - s.tokens); ih != 0 || c3 != 0 || add >= space {
				s.tokens, s.win, s.cur = l.burstN, 0, 0
			} else {
				s.tokens += int64(add)
				s.win, s.cur = int64(hi), int64(lo)
			}
		}
		c := cost * nano
		if s.tokens < c {
			return false
		}
		s.tokens -= c
		return true
	case FixedWindow:
		l.rollFixed(s, now)
		if s.cur+cost > l.limit {
			return false
		}
		s.cur += cost
		return true
	case SlidingWindow:
		s.last = now
		// Forget accepted packets older than the closed interval
		// [now-window, now].
		cut := now - l.window
		if cut > now { // now near the bottom of int64: nothing is older
			cut = math.MinInt64
		}
		for s.n > 0 && s.log[s.head] < cut {
			s.head++
			if int64(s.head) == l.limit {
				s.head = 0
			}
			s.n--
		}
		if int64(s.n) >= l.limit {
			return false
		}
		i := int64(s.head) + int64(s.n)
		if i >= l.limit {
			i -= l.limit
		}
		s.log[i] = now
		s.n++
		return true
	case SlidingWindowCounter:
		l.rollCounter(s, now)
		if !l.swcRoom(s, now, cost) {
			return false
		}
		s.cur += cost
		return true
	}
	return false
}

// Capacity is what a fresh flow may send at once, in cost units: the token
// bucket's burst, or a window's limit.
func (l *Limiter) Capacity() float64 {
	if l.algo == TokenBucket {
		return float64(l.burstN) / nano
	}
	return float64(l.limit)
}

// Left reports what s would accept at now without charging anything, in
// cost units: the tokens in the bucket (fractions included), or what is
// left of the window's limit (for the sliding-window counter, the limit
// less its estimate, at least 0). Like Allow, it takes a now older than
// the newest time s has seen as that time. It does not modify s or
// allocate: for listings, not for the per-packet path.
func (l *Limiter) Left(s *State, now int64) float64 {
	if now < s.last {
		now = s.last
	}
	switch l.algo {
	case TokenBucket:
		t := *s
		l.refill(&t, now)
		return float64(t.tokens) / nano
	case FixedWindow:
		if floorDiv(now, l.window) != s.win {
			return float64(l.limit)
		}
		return float64(l.limit - s.cur)
	case SlidingWindow:
		// The log is in time order from head: binary search for the
		// first timestamp inside [now-window, now].
		cut := now - l.window
		if cut > now {
			cut = math.MinInt64
		}
		at := func(i int32) int64 {
			j := int64(s.head) + int64(i)
			if j >= l.limit {
				j -= l.limit
			}
			return s.log[j]
		}
		lo, hi := int32(0), s.n
		for lo < hi {
			m := lo + (hi-lo)/2
			if at(m) < cut {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return float64(l.limit - int64(s.n-lo))
	case SlidingWindowCounter:
		prev, cur := s.prev, s.cur
		w := floorDiv(now, l.window)
		if w != s.win {
			if w == s.win+1 {
				prev = cur
			} else {
				prev = 0
			}
			cur = 0
		}
		est := float64(cur)
		if prev > 0 {
			left := l.window - (now - w*l.window)
			est += float64(prev) * float64(left) / float64(l.window)
		}
		return max(0, float64(l.limit)-est)
	}
	return 0
}

// Depart is the shaping token bucket's decision (a limiter made with
// MaxDelay, which Allow must not be given): the leaky bucket as a queue. The
// bucket may go below zero, down to −rate × MaxDelay: what is below zero is
// the queue of held packets, drained at the rate, so the capacity of the
// whole is burst + rate × MaxDelay.
//
// A packet of the given cost at now that the bucket holds now is charged
// and departs now: Depart returns now (the newest time s has seen, if now is
// older). Else it would depart when the refill covers it, at
// now + ⌈(cost − tokens) / rate⌉; if that is at most MaxDelay away and hold
// is true, the packet is charged (the bucket goes below zero by it) and
// Depart returns that time; a later packet of the flow then departs after
// it, at the earliest cost/rate later, so the flow's packets leave in
// arrival order and at the rate. Otherwise (too late, or the caller cannot
// hold the packet) nothing is charged and Depart reports false: the packet
// is to be dropped. Departure times are in now's clock and exact to the
// nanosecond: the departure of the rational token bucket (see nano),
// rounded up, never early. It does not allocate.
func (l *Limiter) Depart(s *State, now int64, cost int64, hold bool) (depart int64, ok bool) {
	return l.departWithin(s, now, cost, hold, l.maxDelay)
}

// departWithin is Depart with a max delay of maxDelay (at most
// MaxMaxDelay, and rate × maxDelay at most MaxBurst) in place of l's: a
// total's bucket holds a shaping rule's packets up to the rule's max delay.
func (l *Limiter) departWithin(s *State, now int64, cost int64, hold bool, maxDelay int64) (depart int64, ok bool) {
	if now < s.last {
		now = s.last
	}
	l.refill(s, now)
	c := cost * nano
	if s.tokens >= c {
		s.tokens -= c
		return now, true
	}
	if !hold {
		return 0, false
	}
	// The wait is the least w such that the refill over w nanoseconds,
	// with the fraction s carries, brings the bucket to c: exactly
	// ⌈(c − tokens − fraction) / rate⌉, the rational departure rounded up.
	need := uint64(c - s.tokens) // > 0; < 2⁶² (tokens ≥ −rate × MaxDelay)
	hi, lo := uint64(s.win), uint64(s.cur)
	if l.grow(uint64(maxDelay), hi, lo) < need {
		return 0, false // it would wait longer than maxDelay
	}
	// A float estimate, off by at most a nanosecond or two (w ≤ 10 s, so
	// its relative error of ~2⁻⁵² is far below 1 ns), then made exact.
	fr := (float64(hi) + float64(lo)/(1<<64)) / (1 << 64)
	w := min(max(int64(math.Ceil((float64(need)-fr)/l.rate)), 1), maxDelay)
	for w > 1 && l.grow(uint64(w-1), hi, lo) >= need {
		w--
	}
	for l.grow(uint64(w), hi, lo) < need {
		w++
	}
	s.tokens -= c
	return now + w, true
}

// exactRate returns rate (nano-units per nanosecond) as fixed point: whole
// nano-units and a fraction in units of 2⁻¹²⁸ (high, low words). It is the
// float64's exact value for rate ≥ 2⁻⁷⁶; a smaller rate's fraction is
// truncated, which changes nothing: below 2⁻⁶⁴ nano-units per nanosecond
// no span of int64 nanoseconds refills a whole nano-unit, exactly or not,
// and the fraction restarts from 0 at Reset and whenever the bucket fills.
// A rate of 2⁶² or more (far above any rate a bucket can tell apart: it
// fills any bucket in 1 ns) is taken as 2⁶².
func exactRate(rate float64) (whole, hi, lo uint64) {
	if !(rate > 0) {
		return 0, 0, 0
	}
	if rate >= 1<<62 {
		return 1 << 62, 0, 0
	}
	// rate = m × 2^e exactly, m < 2⁵³.
	b := math.Float64bits(rate)
	m, exp := b&(1<<52-1), int(b>>52&0x7ff)
	if exp == 0 {
		exp = 1 // subnormal
	} else {
		m |= 1 << 52
	}
	e := exp - 1075
	if e >= 0 {
		return m << e, 0, 0 // < 2⁶²
	}
	sh := uint(-e) // rate = m / 2^sh
	if sh < 64 {
		whole = m >> sh
		m &= 1<<sh - 1
	}
	// The fraction m / 2^sh in units of 2⁻¹²⁸: m × 2^(128−sh).
	switch {
	case sh <= 64: // m < 2^sh: the shift stays within 128 bits
		return whole, m << (64 - sh), 0
	case sh <= 128:
		k := 128 - sh // m < 2^sh = 2^(128−k): fits
		return whole, m >> (64 - k), m << k
	default:
		return whole, 0, m >> (sh - 128)
	}
}

// grow returns the whole nano-units that elapsed nanoseconds at the rate
// add to a fraction hi:lo already earned (the floor of elapsed × rate +
// fraction), saturated at 2⁶³ (more than any bucket's room).
func (l *Limiter) grow(elapsed, hi, lo uint64) uint64 {
	whole, _, _ := l.grow3(elapsed, hi, lo)
	return whole
}

// grow3 is grow, returning also the fraction left over.
func (l *Limiter) grow3(elapsed, hi, lo uint64) (whole, nhi, nlo uint64) {
	// elapsed × (rateHi·2⁶⁴ + rateLo) + hi·2⁶⁴ + lo, a 192-bit sum:
	// the word above 2¹²⁸ is whole nano-units, the two below the fraction.
	h1, l1 := bits.Mul64(elapsed, l.rateLo)
	h2, l2 := bits.Mul64(elapsed, l.rateHi)
	nlo, c := bits.Add64(l1, lo, 0)
	nhi, c1 := bits.Add64(l2, h1, c)
	nhi, c2 := bits.Add64(nhi, hi, 0)
	whole = h2 + c1 + c2 // ≤ elapsed: the fractions are below 1
	ih, il := bits.Mul64(elapsed, l.rateInt)
	whole, c = bits.Add64(whole, il, 0)
	if ih != 0 || c != 0 || whole > 1<<63 {
		return 1 << 63, 0, 0
	}
	return whole, nhi, nlo
}

// refill brings the token bucket s to now (not older than s.last): it adds
// the whole nano-units earned since s.last and carries the fraction, or
// fills the bucket (and drops the fraction) if that reaches its capacity.
// It is grow3 written out, one call less on the per-packet path.
func (l *Limiter) refill(s *State, now int64) {
	if now <= s.last {
		return
	}
	elapsed := uint64(now) - uint64(s.last) // exact even across the int64 range
	s.last = now
	h1, l1 := bits.Mul64(elapsed, l.rateLo)
	h2, l2 := bits.Mul64(elapsed, l.rateHi)
	lo, c := bits.Add64(l1, uint64(s.cur), 0)
	hi, c1 := bits.Add64(l2, h1, c)
	hi, c2 := bits.Add64(hi, uint64(s.win), 0)
	ih, il := bits.Mul64(elapsed, l.rateInt)
	add, c3 := bits.Add64(h2+c1+c2, il, 0)
	// tokens ≤ burstN, so space ≥ 0; ≤ 2⁶² with a shaping queue.
	if space := uint64(l.burstN - s.tokens); ih != 0 || c3 != 0 || add >= space {
		s.tokens, s.win, s.cur = l.burstN, 0, 0
		return
	}
	s.tokens += int64(add)
	s.win, s.cur = int64(hi), int64(lo)
}

func floorDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// rollFixed moves a fixed window's state to now's window (its count from
// zero when now is in another window than the last packet's).
func (l *Limiter) rollFixed(s *State, now int64) {
	s.last = now
	if w := floorDiv(now, l.window); w != s.win {
		s.win, s.cur = w, 0
	}
}

// rollCounter moves a sliding-window counter's state to now's window: the
// window before it keeps the last window's count if that was the one just
// before, else nothing.
func (l *Limiter) rollCounter(s *State, now int64) {
	s.last = now
	if w := floorDiv(now, l.window); w != s.win {
		if w == s.win+1 {
			s.prev = s.cur
		} else {
			s.prev = 0
		}
		s.win, s.cur = w, 0
	}
}
