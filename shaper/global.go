package shaper

import (
	"math"
	"sync/atomic"

	"github.com/packetshaper/packetshaper/flows"
)

// A global rule (Config.Global) limits each flow key across several hosts:
// its budget lives in a store they share (package global: Redis), and each
// host takes it in leases, ahead of need, from a background refresher. The
// engine never waits for the store: per packet it only spends the tokens of
// the key's Lease on this host, with atomics, and a lease that runs low or
// dry asks its refresher for more through a LeaseQueue. When the store
// cannot be reached, the source publishes a local limiter in the rule's
// LocalLimit and the engine limits the rule's flows with it instead.
//
// shaper defines this seam and nothing of the store: Global is all an
// engine knows of it.

// Global is a global rule's budget as an engine sees it. Package global
// implements it; a rule whose Global is nil runs as a local rule (replay:
// a capture holds one host's view).
type Global interface {
	// Lease returns key k's lease on this host, making it if need be, or
	// nil when the source holds as many keys as it may (the flow is then
	// limited by LocalLimit's Overflow limiter). It is called when a flow
	// enters an engine's table and when its lease was retired, not per
	// packet, from the goroutines of several engines at once. It must not
	// keep k.
	Lease(k *flows.Key) *Lease
	// Local is where the source publishes the local limiters of the rule.
	// Called once per engine.
	Local() *LocalLimit
}

// LocalLimit holds the local limiters of a global rule, which its source
// sets and the engine reads per packet with one atomic load.
type LocalLimit struct {
	fallback atomic.Pointer[Limiter]
	overflow atomic.Pointer[Limiter]
}

// SetFallback makes lim limit every flow of the rule, each in its own
// state on this host, instead of the leases (nil: back to the leases).
// lim must have the rule's algorithm.
func (l *LocalLimit) SetFallback(lim *Limiter) { l.fallback.Store(lim) }

// Fallback returns the limiter set by SetFallback, nil while leases work.
func (l *LocalLimit) Fallback() *Limiter { return l.fallback.Load() }

// SetOverflow sets the limiter of flows that got no lease (Global.Lease
// returned nil). Until it is set, such flows are dropped.
func (l *LocalLimit) SetOverflow(lim *Limiter) { l.overflow.Store(lim) }

// Lease is this host's share of one flow key's global budget: tokens that
// its source took from the shared store, which the engine spends without
// asking anyone. Tokens count cost units (packets, or bytes with a bit
// rate). The engine takes (Take); the source adds (Grant), sets the time
// the tokens may be spent until, the low-water mark and the floor, and
// reads the demand the engine could not meet. All of it is atomic: no lock
// is shared between the engines and the source.
//
// A new lease (NewLease) has no tokens but credit for one packet: the first
// packet of a key new to this host passes at once, and the source charges
// it to the store with its first ask. Once a grant has come back, the floor
// is 0 and there is no more credit.
//
// The zero Lease is not valid; make one with NewLease.
type Lease struct {
	// tokens the engine may spend; below 0 only by the credit.
	tokens atomic.Int64
	// until: tokens may be spent while now < until (engine time, ns).
	until atomic.Int64
	// floor is the least tokens may fall to (-MaxCredit before the
	// first grant, 0 after; retiredFloor once retired).
	floor atomic.Int64
	// low: a take that leaves fewer tokens than low queues the lease for
	// its source, which asks for more before it runs out.
	low atomic.Int64
	// demand counts cost the engine wanted but did not take from the
	// tokens (refused, or decided by the fallback limiter) since the
	// source last read it.
	demand atomic.Int64
	// queued is 1 while the lease waits in q.
	queued atomic.Uint32
	q      *LeaseQueue
	// Owner is the source's own data for the lease; the engine never
	// touches it.
	Owner any
}

const (
	// MaxCredit is how far below zero a new lease's tokens may go: one
	// packet of any size (a packet's cost is at most its IP length).
	MaxCredit    = 65535
	retiredFloor = math.MaxInt64
	noExpiry     = math.MaxInt64
)

// NewLease returns a lease that queues itself in q (which may be nil)
// when it runs low, with no tokens, credit for one packet and no expiry.
func NewLease(q *LeaseQueue, owner any) *Lease {
	l := &Lease{q: q, Owner: owner}
	l.floor.Store(-MaxCredit)
	l.until.Store(noExpiry)
	return l
}

// Take spends cost tokens at now (engine time) if the lease holds them and
// has not expired; otherwise it counts cost as unmet demand. Either way,
// a lease left below its low-water mark is queued for its source. It does
// not allocate and takes no lock.
func (l *Lease) Take(now, cost int64) bool {
	if now < l.until.Load() {
		floor := l.floor.Load()
		for {
			b := l.tokens.Load()
			nb := b - cost
			// Credit (a floor below 0) covers one packet: the one
			// that takes tokens from 0 or more to below 0.
			if nb < floor || nb < 0 && b < 0 {
				break
			}
			if l.tokens.CompareAndSwap(b, nb) {
				if nb < l.low.Load() {
					l.wake()
				}
				return true
			}
		}
	}
	l.demand.Add(cost)
	l.wake()
	return false
}

// Demand counts cost as wanted but not taken from the tokens (the engine
// decided it with the fallback limiter): the source sees the key is active.
func (l *Lease) Demand(cost int64) {
	l.demand.Add(cost)
	l.wake()
}

// wake queues the lease for its source unless it is queued already.
func (l *Lease) wake() {
	if l.q != nil && l.queued.Load() == 0 && l.queued.CompareAndSwap(0, 1) {
		l.q.push(l)
	}
}

// Retired reports whether the source has given the lease up: the engine
// must ask Global.Lease for the key's current one.
func (l *Lease) Retired() bool { return l.floor.Load() == retiredFloor }

// The source's side.

// Tokens returns the tokens the engine may still spend (below 0: credit
// spent, to be charged).
func (l *Lease) Tokens() int64 { return l.tokens.Load() }

// Grant adds n tokens (the source charged or was granted them) and moves
// the expiry to until (engine time; ignored if 0). The first grant ends
// the credit.
func (l *Lease) Grant(n, until int64) {
	l.tokens.Add(n)
	if until != 0 {
		l.until.Store(until)
	}
	if f := l.floor.Load(); f < 0 {
		l.floor.CompareAndSwap(f, 0)
	}
}

// Until returns the time the tokens may be spent until.
func (l *Lease) Until() int64 { return l.until.Load() }

// Expire makes the tokens unspendable from now on (until = 0) and drops
// those left, keeping a negative balance (credit spent, to be charged). It
// returns the tokens dropped.
func (l *Lease) Expire() int64 {
	l.until.Store(0)
	for {
		b := l.tokens.Load()
		if b <= 0 || l.tokens.CompareAndSwap(b, 0) {
			return max(b, 0)
		}
	}
}

// Restart makes the lease new again (no tokens but the credit of one
// packet, no expiry), keeping a negative balance to be charged: after the
// store was unreachable, the next asks start afresh.
func (l *Lease) Restart() {
	l.Expire()
	l.floor.Store(-MaxCredit)
	l.until.Store(noExpiry)
}

// SetLow sets the low-water mark.
func (l *Lease) SetLow(n int64) { l.low.Store(n) }

// TakeDemand returns the unmet demand counted since the last call and
// resets it.
func (l *Lease) TakeDemand() int64 { return l.demand.Swap(0) }

// Retire gives the lease up: every take fails, and the engine asks
// Global.Lease for the key again.
func (l *Lease) Retire() {
	l.floor.Store(retiredFloor)
	l.until.Store(0)
}

// LeaseQueue is a bounded lock-free queue of leases that ran low, from the
// engines (any number of goroutines) to their source (one goroutine). When
// it is full a lease is not queued but Overflowed says so, and the source
// must then look at all its leases.
type LeaseQueue struct {
	head atomic.Uint64 // next slot to read (the consumer's)
	tail atomic.Uint64 // next slot to write
	over atomic.Uint32
	slot []atomic.Pointer[Lease]
	mask uint64
	// notify, if set, is sent to (without blocking) when a lease is
	// queued or finds the queue full, so that the source can wait for
	// one instead of polling.
	notify chan<- struct{}
}

// SetNotify has the queue send to ch, without blocking, whenever it
// queues a lease (or finds itself full): ch should have a buffer of one.
// Call it before any lease uses the queue.
func (q *LeaseQueue) SetNotify(ch chan<- struct{}) { q.notify = ch }

func (q *LeaseQueue) signal() {
	if q.notify != nil {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
}

// NewLeaseQueue returns a queue of n slots (rounded up to a power of 2).
func NewLeaseQueue(n int) *LeaseQueue {
	size := 1
	for size < n {
		size <<= 1
	}
	return &LeaseQueue{slot: make([]atomic.Pointer[Lease], size), mask: uint64(size - 1)}
}

func (q *LeaseQueue) push(l *Lease) {
	for {
		t := q.tail.Load()
		if t-q.head.Load() > q.mask {
			// Full: the lease stays marked as queued so that it is
			// not pushed over and over; the source's sweep finds it.
			q.over.Store(1)
			q.signal()
			return
		}
		if q.tail.CompareAndSwap(t, t+1) {
			q.slot[t&q.mask].Store(l)
			q.signal()
			return
		}
	}
}

// Pop calls fn for each lease queued, in order, clearing its queued mark
// first (a lease that runs low again while fn runs is queued again). It
// stops at a slot reserved but not yet written. One goroutine only.
func (q *LeaseQueue) Pop(fn func(*Lease)) {
	for {
		h := q.head.Load()
		if h == q.tail.Load() {
			return
		}
		s := &q.slot[h&q.mask]
		l := s.Load()
		if l == nil {
			return // a producer is between its reservation and its write
		}
		s.Store(nil)
		q.head.Store(h + 1)
		l.queued.Store(0)
		fn(l)
	}
}

// Overflowed reports whether a lease found the queue full since the last
// call, and resets it.
func (q *LeaseQueue) Overflowed() bool { return q.over.Swap(0) == 1 }

// Unqueue clears l's queued mark (for a lease left marked by a full
// queue, found by the source's sweep).
func (l *Lease) Unqueue() { l.queued.Store(0) }
