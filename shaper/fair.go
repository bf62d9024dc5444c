package shaper

import "github.com/packetshaper/packetshaper/flows"

// Fair shaping under a total: how a shaping rule's keys share the total
// they charge.
//
// The engine fixes a held packet's departure when it arrives (Decision.
// Depart), so a scheduler that reorders packets already queued, as DRR or
// SFQ do at dequeue, is not open to it. It shares the total instead as the
// fluid max-min model does, by spacing each key's departures: a packet of
// key k departs at
//
//	d = Depart_k( max(now, T, F_k) )
//
// where T is when the total's token bucket (charged in arrival order, a
// holding bucket as a shaping rule's) has room for the packet, F_k is the
// key's fair tag — its previous departure plus that packet's cost over the
// fair rate — and Depart_k is the key's own holding bucket run at that
// time. A key's held packets therefore leave no faster than its own limit
// and no faster than the fair rate (the fair tag is the quantum: one packet
// per cost/fair), and the total's bucket caps their sum.
//
// The fair rate is the water level of max-min fairness, set once per epoch
// (fairEpoch) from the one before: with N keys seen, Nf of them held back
// by the fair tag, and L the rate of the packets the fair tag did not hold
// (keys below the fair share, or held by their own limit),
//
//	fair = max(R/N, (R − L)/Nf)        (Nf > 0)
//	fair = max(R/N, R − L + L/N)       (Nf = 0: no key is at the level;
//	                                    any one may grow by what is left)
//
// and R after an epoch without packets. The level is a fixed point of the
// fluid shares: keys whose demand is below it keep their demand (they are
// in L and never held by their tag), the others share what is left
// equally, none above its own limit, at least R/N each. Bounds: a key's
// departures over any interval T are at most its burst + rate × T (its own
// bucket) and, while it is held by its tag, one packet + fair × T; all the
// total's departures are at most the total's burst + R × (T + max-delay)
// over any interval and burst + R × T from any instant none is held (T is a
// lower bound on every departure, and no packet departs more than
// max-delay after its arrival); a packet that would wait longer than its
// rule's max-delay, by its key, the total or its tag, is dropped and costs
// neither bucket anything. The level lags demand by one epoch: the others
// make room for a new key from the next epoch on, once what they hold
// already has left (at most max-delay). A key below the
// level is never held by its tag, but the total's bucket is charged in
// arrival order, so it waits for what the others hold beyond the total's
// burst, (held − burst) / R: nothing in the steady state when the burst is
// at least R × max-delay (a byte total's default burst, a tenth of a
// second at its rate, is for max delays up to 100 ms). The state is O(1)
// per total (fairState) and three words per key in the key's State, which
// a shaping token bucket leaves unused: the fair tag (prev) and the epochs
// it was last counted seen and held in (head, n).

// fairEpoch is how often, in nanoseconds, a total's fair rate is set from
// the epoch before: long enough to see every active key send, short enough
// that a new key waits little for its share.
const fairEpoch = int64(50e6)

// fairState is what a total keeps for its shaping rules' fair share.
type fairState struct {
	epoch int64 // the current epoch: now / fairEpoch
	// seen and held count the keys seen and held back by their fair tag
	// this epoch; light the total's cost units of the packets accepted
	// that their tag did not hold.
	seen, held int32
	light      int64
	// spacing is the fair tag's quantum this epoch: nanoseconds per
	// cost unit, 1e9 / fair rate.
	spacing float64
	// rate is the fair rate this epoch (cost units per second), for
	// listings and tests.
	rate float64
}

// roll moves f on to now's epoch, setting its fair rate for it from the
// epoch before (see fair.go's opening comment), at total rate r.
// A now that goes back stays in the current epoch.
func (f *fairState) roll(now int64, r float64) {
	ep := floorDiv(now, fairEpoch)
	if ep <= f.epoch && f.spacing != 0 {
		return
	}
	fair := r
	if ep == f.epoch+1 && f.seen > 0 {
		n := float64(f.seen)
		light := float64(f.light) * 1e9 / float64(fairEpoch)
		fair = r / n
		if f.held > 0 {
			fair = max(fair, (r-light)/float64(f.held))
		} else {
			fair = max(fair, r-light+light/n)
		}
	}
	f.epoch, f.seen, f.held, f.light = ep, 0, 0, 0
	f.rate, f.spacing = fair, 1e9/fair
}

// epochTag is the epoch as a key's State records it: never 0, the tag of
// a fresh State.
func epochTag(ep int64) int32 { return int32(ep&(1<<30-1)) + 1 }

// FairRate is the rate, in total i's cost units per second, that total
// i's shaping rules space each key's held packets at this epoch: for
// listings and tests.
func (e *Engine) FairRate(i int) float64 { return e.totals[i].st.fair.rate }

// shapeTotal decides a packet of flow f of a shaping rule r with a total:
// held until its key, the total and its fair tag all allow it (see
// fair.go's opening comment), or dropped as ShapeOverflow, charged to
// neither, if that is beyond its rule's max delay or the caller can hold no
// more.
func (e *Engine) shapeTotal(r *hotRule, f *flow, p *flows.Packet, m *Meta, now, cost int64, d *Decision) {
	rs, t, k := r.st, r.tot, &f.state
	t.stats.Packets++
	tc := totalCost(t, p.Length, m)
	t.fair.roll(now, t.lim.rate)
	if tag := epochTag(t.fair.epoch); k.head != tag {
		k.head = tag
		t.fair.seen++
	}
	hold := e.holdRoom > 0
	// The total's bucket holds the packet up to the rule's max delay.
	saved, keySaved := t.state, *k
	at, ok := t.lim.departWithin(&t.state, now, tc, hold, rs.lim.maxDelay)
	if !ok {
		t.stats.Dropped++
		d.OverTotal = true
		e.overflow(rs, f, p, d)
		return
	}
	byTag := k.prev > at
	at = max(at, k.prev)
	dep, ok := rs.lim.Depart(k, at, cost, hold)
	if !ok || dep-now > rs.lim.maxDelay || dep > now && !hold {
		// Over the max delay, or no room to hold it: it costs neither
		// bucket anything, and the key's clock does not move on to a
		// departure that did not happen.
		t.state, *k = saved, keySaved
		e.overflow(rs, f, p, d)
		return
	}
	if byTag && dep == at {
		if tag := epochTag(t.fair.epoch); k.n != tag {
			k.n = tag
			t.fair.held++
		}
	} else {
		t.fair.light += tc
	}
	// The tag's step, capped where it would overflow (2⁶⁰ ns is 36
	// years: a key that far behind its share is refused all the same).
	k.prev = dep + int64(min(float64(tc)*t.fair.spacing, 1<<60))
	t.stats.Accepted++
	e.accepted(rs, f, now, dep, d)
}

// totalCost is what a packet of length costs total t: 1, its length for a
// byte total, or what m.Cost says.
func totalCost(t *totalState, length int, m *Meta) int64 {
	tc := int64(1)
	if t.bytes {
		tc = int64(length)
	}
	if m != nil && m.Cost.Set {
		tc = m.Cost.Packets
		if t.bytes {
			tc = m.Cost.Bytes
		}
	}
	return tc
}
