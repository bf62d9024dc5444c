package shaper

import "math/bits"

// Need says what a flow's limiter must hold to accept a packet whose cost
// is given apart from its decode (Meta.Cost): the kernel fast path decides
// some packets as several (a GSO/GRO packet is several segments on the
// wire; a fragment is part of a datagram), and the engine decides them the
// same way when it is handed them, so that the two paths agree.
type Need uint8

const (
	// NeedAll: the packet's whole cost, as Allow.
	NeedAll Need = iota
	// NeedCapped: the cost, or the limiter's whole capacity when the cost
	// is more (the burst; a window's limit): a GSO/GRO packet, whose
	// segments together may exceed what the bucket can ever hold, is
	// decided at once, accepted on a full bucket (an empty window) and its
	// excess charged as debt, so it is never starved; over any interval a
	// flow gets at most burst + rate × T plus one such packet's excess
	// over the burst.
	NeedCapped
	// NeedNone: nothing; always accepted and charged the cost, as debt if
	// need be (a later fragment of a datagram the limit accepted at its
	// first fragment: the datagram was accepted).
	NeedNone
	// NeedOver: refused, charged nothing (a later fragment of a datagram
	// the limit refused at its first fragment).
	NeedOver
)

// Cost, when Set, is what a packet costs instead of what its decode says:
// Packets under a packet rate, Bytes under a byte rate, with Need.
type Cost struct {
	Set            bool
	Packets, Bytes int64
	Need           Need
}

// debtMax bounds the debt a flow's state holds (tokens below zero, a
// window's count over its limit), far beyond what any refill pays back, so
// that charges without a check never overflow (the fast path's DEBT_MAX).
const debtMax = 1 << 62

// AllowNeed is Allow for a packet of the given cost whose flow must hold
// need (see Need) rather than the cost: the token bucket, the fixed window
// and the sliding-window counter (the fast path's allow, the same
// arithmetic). The sliding-window log counts packets: it accepts a packet
// of any cost as one (NeedNone: accepted, not logged). It does not allocate.
func (l *Limiter) AllowNeed(s *State, now, cost int64, need Need) bool {
	switch need {
	case NeedAll:
		return l.Allow(s, now, cost)
	case NeedOver:
		return false
	}
	if now < s.last {
		now = s.last
	}
	switch l.algo {
	case TokenBucket:
		l.refill(s, now)
		c := cost * nano
		if need != NeedNone && s.tokens < capped(c, l.burstN, need) {
			return false
		}
		s.tokens = max(s.tokens-c, -debtMax)
		return true
	case FixedWindow:
		l.rollFixed(s, now)
		if need != NeedNone && s.cur+capped(cost, l.limit, need) > l.limit {
			return false
		}
		s.cur = min(s.cur+cost, debtMax)
		return true
	case SlidingWindowCounter:
		l.rollCounter(s, now)
		if need != NeedNone && !l.swcRoom(s, now, capped(cost, l.limit, need)) {
			return false
		}
		s.cur = min(s.cur+cost, debtMax)
		return true
	case SlidingWindow:
		if need == NeedNone {
			return true
		}
		return l.Allow(s, now, 1)
	}
	return false
}

// capped is what a flow must hold of cost h under need: h, or at most
// capacity when NeedCapped.
func capped(h, capacity int64, need Need) int64 {
	if need == NeedCapped {
		return min(h, capacity)
	}
	return h
}

// swcRoom is the sliding-window counter's check of Allow for a packet of
// cost h, the window already brought to now.
func (l *Limiter) swcRoom(s *State, now, h int64) bool {
	room := l.limit - s.cur - h
	if room < 0 {
		return false
	}
	if s.prev > 0 {
		// prev × left / window ≤ room, in exact integers:
		// prev × left ≤ room × window, as 128-bit products.
		left := l.window - (now - s.win*l.window) // in (0, window]
		ph, pl := bits.Mul64(uint64(s.prev), uint64(left))
		rh, rl := bits.Mul64(uint64(room), uint64(l.window))
		if ph > rh || ph == rh && pl > rl {
			return false
		}
	}
	return true
}
