package shaper

import "github.com/packetshaper/packetshaper/flows"

// offload queues the exact 5-tuple of p, with its rule's OffloadLimit, for
// TakeOffloads, if the kernel can match it as exactly.
func (e *Engine) offload(rs *ruleState, p *flows.Packet) {
	if p.NoPorts || p.Proto == flows.ProtoICMP || p.Proto == flows.ProtoICMPv6 {
		return
	}
	if e.nOff == offloadBuf {
		e.stats.OffloadsLost++
		return
	}
	var exact flows.KeyConfig
	exact.KeyTo(&e.offloads[e.nOff], p)
	e.offLims[e.nOff] = rs.off
	e.nOff++
	e.stats.Offloads++
}

// OffloadLimit is the token bucket the kernel may hold an offloaded flow
// to, per 5-tuple: never stricter than the flow's rule. Rate is per second
// and Burst the bucket's capacity, in packets, or bytes (IP length) when
// Bytes.
type OffloadLimit struct {
	Rate, Burst float64
	Bytes       bool
}

// OffloadHeadroom is how much faster than its rule the kernel's bucket for
// an offloaded flow refills. Two buckets of one rate in series, the
// kernel's at a packet's arrival and the shaper's when it reads the
// packet (later, by a varying delay), accept less than one: a packet the
// kernel passed on time can reach the shaper when its bucket is a token
// short (an e2e run beside a CPU hog: 346 of 404 per flow). A kernel
// bucket a quarter faster hands the shaper more than its rule takes, so
// the shaper's bucket alone decides, exactly; the kernel drops the rest.
const OffloadHeadroom = 1.25

// offloadLimit is the bucket that accepts at least what a limiter of c
// accepts, over any interval, OffloadHeadroom times as fast: a token
// bucket its own (with Shape, the room of its queue too: burst + rate ×
// MaxDelay), the window algorithms a rate of Limit per Window with a burst
// of 2×Limit (what an interval of length Window can hold at most).
func offloadLimit(c LimiterConfig, bytes bool) OffloadLimit {
	l := OffloadLimit{Rate: c.Rate * OffloadHeadroom, Burst: c.Burst, Bytes: bytes}
	switch c.Algorithm {
	case TokenBucket:
		l.Burst += c.Rate * float64(c.MaxDelay) / 1e9
	default:
		l.Burst = 2 * c.Rate * float64(c.Window) / 1e9
	}
	return l
}

// TakeOffloads calls fn for each flow reported since the last call (see
// Policy.OffloadAfter): its exact 5-tuple key (mode 5tuple, no prefixes)
// and the limit of the rule that dropped it.
func (e *Engine) TakeOffloads(fn func(k flows.Key, l OffloadLimit)) {
	for i := 0; i < e.nOff; i++ {
		fn(e.offloads[i], e.offLims[i])
	}
	e.nOff = 0
}
