package global

import (
	"math"
	"sync/atomic"
)

// Rate leases (issue 33, Doorman's design), the default: a client opened
// without Config.TokenLeases ([redis] leases = "token") gives its
// token-bucket rules rate leases instead of token leases: an ask is granted a rate (cost units per
// second) for the rest of the store's refresh epoch and the next (epochs
// of one refresh interval on the store's clock), and the host spends it
// locally as a token bucket of that rate holding at most what the rate
// makes in max(Interval, global-slack × 1 s) (Rule.slack's share). Each
// host asks once an interval per active key, with its demand; the store
// shares the rate among the hosts in proportion to their demands, never
// handing out more than the rate in all over the leases valid in an epoch.
// So a hot key costs about hosts ÷ interval asks per second whatever its
// burst, and no refill is lost in the store when a host comes late; the
// key's burst bucket (below) gives the fleet its burst.
//
// The store's part is rateLua, a branch of the lease script (algorithm 2).
// In the key's hash:
//
//	e               the current epoch (store time ÷ interval)
//	Rc, Wc, Nc      the rates granted, the demands and the hosts that
//	                asked in epoch e
//	Rp, Wp, Np      the same for the hosts whose last ask was in e - 1
//	he:, hr:, hw:ID per host: the epoch of its last ask, its rate, its
//	                demand
//	b, bs           the burst bucket: its tokens and when they were
//	                counted (store time, µs)
//
// A lease granted in epoch e is valid until e + 1 ends, so the leases
// valid now are those of Rc and Rp: a grant is at most rate - Rc - Rp (a
// host's own earlier lease first taken out: the new one replaces it). The
// sums roll over with the epochs: none is ever summed over all hosts, and
// a forged one lasts two epochs at most. A key gone that this host knew
// was flushed: its epoch is taken as spent (x: nothing new granted until
// the next), but a host that knew it keeps the lease it held (its ask's
// held, the rate), counted again from then. Hosts that have not asked for
// two epochs and the horizon are dropped from the hosts set (KEYS[2]) at
// most 8 an ask, with their fields.
//
// The burst: beside the shares the key keeps a bucket of at most the
// burst, full when the key is new to every host, empty after a flush or a
// forged count, refilled at the rate that no lease valid holds (the rate
// less Rc and Rp as they were written, piece by piece over the epochs
// since: the leases of e end with e + 1, those of e - 1 with e). Each ask
// draws from it up to the room of the host's local bucket (what its new
// rate lets it hold, less what it holds: ARGV[15]), in the asks the host
// makes anyway: a fleet that starts on a full bucket, or comes back after
// it refilled, gets burst + rate × T over T, and no more: the shares and
// the bucket's refill together are at most the rate.
//
// Reply: {rate ×1000, hosts, fair share ×1000, the rate no lease valid
// holds ×1000, lease left µs, demand ×1000, all demands ×1000, burst
// tokens drawn}.
const rateLua = `
if algo == 2 then
  local iv = win
  local ep = math.floor(now / iv)
  local hz = KEYS[2]
  local len = redis.call('HLEN', KEYS[1])
  if len > 16 + 3 * maxhosts then redis.call('DEL', KEYS[1]) end
  if redis.call('ZCARD', hz) > maxhosts + 64 then redis.call('DEL', hz) end
  local names = {'e', 'Rc', 'Rp', 'Wc', 'Wp', 'Nc', 'Np', 'x', 'b', 'bs', 'he:' .. me, 'hr:' .. me, 'hw:' .. me}
  local v = redis.call('HMGET', KEYS[1], unpack(names))
  local f = {}
  for i = 1, #names do if v[i] then f[names[i]] = v[i] end end
  local fresh = len == 0 and not known
  local wmax = rate * (maxhosts + 1) * 1e6
  -- a sum: nil unless a finite number from 0 to hi
  local function sum(s, hi)
    local x = fin(s)
    if x == nil or x < 0 then return nil end
    return math.min(x, hi)
  end
  local e = fin(f.e)
  local Rc, Rp, Wc, Wp, Nc, Np = 0, 0, 0, 0, 0, 0
  -- spent: this epoch was flushed or forged (x, the epoch it happened)
  local spent = fin(f.x) == ep
  -- The burst bucket (b, bs: its tokens and when it was last refilled):
  -- it refills at the rate no lease valid holds, up to the burst. Not a
  -- number, negative or above the burst: empty.
  local bt, bs = fin(f.b), time(f.bs)
  if bt == nil or bt < 0 or bt > size then bt = 0 end
  if e == nil or e ~= math.floor(e) or e > ep then
    -- no state: a new key (a full burst bucket), or one flushed (this
    -- epoch spent, the bucket empty), or a forged epoch (the same)
    if fresh then bt = size else Rp, spent, bt = rate, true, 0 end
  else
    -- The rate no lease held since bs: in epoch e the rate less the
    -- sums written then (the leases of e and e - 1), in e + 1 less
    -- those of e, after that the whole rate (a sum not valid: the rate).
    local R0, R1 = sum(f.Rc, rate) or rate, sum(f.Rp, rate) or rate
    local from = math.max(bs or now, e * iv)
    local function free(a, b, x)
      local lo, hi = math.max(a, from), math.min(b, now)
      if hi <= lo or x <= 0 then return 0 end
      return (hi - lo) * x / 1e6
    end
    bt = math.min(size, bt + free(from, (e + 1) * iv, rate - R0 - R1) +
      free((e + 1) * iv, (e + 2) * iv, rate - R0) + free((e + 2) * iv, now, rate))
  end
  if e ~= nil and e == math.floor(e) and e <= ep and e >= ep - 1 then
    -- (a sum not valid is a spent rate, or no demand, or no host)
    Rc, Rp = sum(f.Rc, rate) or rate, sum(f.Rp, rate) or rate
    Wc, Wp = sum(f.Wc, wmax) or 0, sum(f.Wp, wmax) or 0
    Nc, Np = sum(f.Nc, maxhosts + 1) or 0, sum(f.Np, maxhosts + 1) or 0
    if e == ep - 1 then
      Rp, Wp, Np = Rc, Wc, Nc
      Rc, Wc, Nc = 0, 0, 0
    end
  end
  -- this host's lease before: the new one replaces it
  local oe = fin(f['he:' .. me])
  local orr, ow = sum(f['hr:' .. me], rate) or 0, sum(f['hw:' .. me], wmax) or 0
  if oe == ep then
    Rc, Wc, Nc = math.max(Rc - orr, 0), math.max(Wc - ow, 0), math.max(Nc - 1, 0)
  elseif oe == ep - 1 then
    Rp, Wp, Np = math.max(Rp - orr, 0), math.max(Wp - ow, 0), math.max(Np - 1, 0)
  end
  local w = math.min(math.max(want / 1000, mincap * 1e6 / iv), wmax)
  local share = rate * w / (Wc + Wp + w)
  local r = math.max(math.min(share, rate - Rc - Rp), 0)
  if spent and known and oe ~= ep then
    -- a host's lease from before the flush stands (held, its rate),
    -- counted from now on: only the leases of hosts that do not ask
    -- before the epoch ends go uncounted, for one epoch at most
    r = math.min(math.max(held / 1000, 0), rate)
    share = r
  end
  Rc, Wc, Nc = Rc + r, Wc + w, Nc + 1
  -- Tokens the host's local bucket dropped (above a new cap, or as its
  -- lease ended) are given back (back, at most a burst in all).
  if back == back and back > 0 then bt = math.min(size, bt + back) end
  -- Burst tokens for this host, up to the room its local bucket has
  -- (what its new rate lets it hold, less what it holds: have).
  local room = math.max(math.max(r / rate * slack, mincap) - math.max(have, 0), 0)
  local drawn = math.floor(math.min(room, bt))
  bt = bt - drawn
  redis.call('HSET', KEYS[1], 'e', int(ep), 'Rc', num(Rc), 'Rp', num(Rp), 'Wc', num(Wc), 'Wp', num(Wp),
    'Nc', int(Nc), 'Np', int(Np), 'x', spent and int(ep) or '', 'b', num(bt), 'bs', int(now),
    'he:' .. me, int(ep), 'hr:' .. me, num(r), 'hw:' .. me, num(w))
  local old = now - 2 * iv - horizon
  local function drop(ids)
    for i = 1, #ids do
      local id = ids[i]
      if id ~= me then
        redis.call('ZREM', hz, id)
        redis.call('HDEL', KEYS[1], 'he:' .. id, 'hr:' .. id, 'hw:' .. id)
      end
    end
  end
  drop(redis.call('ZRANGEBYSCORE', hz, '-inf', '(' .. int(old), 'LIMIT', 0, 8))
  drop(redis.call('ZRANGEBYSCORE', hz, '(' .. int(now + horizon), '+inf', 'LIMIT', 0, 8))
  redis.call('ZADD', hz, int(now), me)
  local left = (ep + 2) * iv - now
  -- (kept until the burst bucket is full again once every lease ended:
  -- a key that expires is new, with a full bucket)
  local ms = math.ceil((left + (size - bt) / rate * 1e6 + horizon) / 1000) + 1000
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', hz, ms)
  return {math.floor(r * 1000), math.max(Nc + Np, 1), math.floor(share * 1000),
    math.floor(math.max(rate - Rc - Rp, 0) * 1000), math.floor(left),
    math.floor(w * 1000), math.floor((Wc + Wp) * 1000), drawn}
end
`

// rateState is a rate lease's state on the host, in entry.
type rateState struct {
	rr     float64 // the rate granted, cost units per second (0: none)
	share  float64 // the fair share the store computed with it
	until  int64   // the lease's end (host clock)
	fillAt int64   // the local bucket's last refill
	carry  float64 // refill not yet a whole cost unit
	prev   float64 // the rate of the lease the ask in flight replaces
	prevTo int64   // that lease's end (host clock)
	busy   bool    // the demands at the last ask may take the rate
	// Tokens the local bucket dropped (above a new cap, or as its lease
	// ended), given back to the key's burst bucket with the next ask;
	// backSent, those the ask in flight gives back.
	back, backSent int64
}

// rateLoss counts where this host's rate leases went that its packets
// could not spend (milli cost units), for the fleet simulation: refill
// dropped at the local bucket's cap, rate not earned while a key had no
// valid lease (its renewal late), tokens dropped (a lease expired, or
// above a new cap), the leases that expired so; and the asks sent again
// soon, by cause.
type rateLoss struct {
	capped, unleased, expired, dropped atomic.Uint64
	short, over, free                  atomic.Uint64
}

// rateCap is what a host with rate rr may hold: what rr makes in
// max(Interval, global-slack × 1 s) (so that the hosts together hold at
// most Rule.slack), at least one packet of any size.
func (r *Rule) rateCap(rr float64) int64 {
	return max(int64(rr/r.rate*r.slack), int64(r.mincap))
}

// refill adds to e's lease what its rate made since the last refill (up to
// the lease's end), holding at most rateCap; a balance below 0 (the credit
// of a new key) is paid back first.
func (r *Rule) refill(e *entry, now int64) {
	s := &e.rs
	if s.rr > 0 {
		if end := min(now, s.until); end > s.fillAt {
			s.carry += s.rr * float64(end-s.fillAt) / 1e9
		}
	}
	s.fillAt = max(s.fillAt, now)
	n := int64(s.carry)
	if n <= 0 {
		return
	}
	room := r.rateCap(s.rr) - e.l.Tokens()
	if n >= room {
		r.loss.capped.Add(uint64((s.carry - float64(max(room, 0))) * 1000))
		n, s.carry = max(room, 0), 0
	} else {
		s.carry -= float64(n)
	}
	if n > 0 {
		e.l.Grant(n, 0)
		e.lastTokens += n
		r.granted.Add(uint64(n))
	}
}

// considerRate is consider for a rate lease: refill it, and ask when the
// key is new, or active and its renewal is due (once an interval).
func (r *Rule) considerRate(e *entry, now int64, batch []*entry) []*entry {
	r.observe(e, now)
	r.refill(e, now)
	until := e.l.Until()
	fresh := until == math.MaxInt64
	if !fresh && until <= now && until != 0 {
		x := e.l.Expire()
		r.loss.dropped.Add(uint64(x))
		r.giveBack(e, x)
		e.lastTokens = e.l.Tokens()
		e.rs.rr = 0
		r.loss.expired.Add(1)
	}
	active := now-e.lastActive < r.c.life
	// A host whose demand fell below half its rate, of a key whose
	// demands may take the rate, gives the rest back without waiting
	// for its renewal (a quarter interval after its last ask at the
	// soonest): the demand moved elsewhere, and the hosts it went to
	// get it as they ask again.
	s := &e.rs
	release := s.busy && s.rr > 2*e.rateDemand(now)+r.mincap && now-e.sentAt >= r.c.interval/4
	if !fresh && !(active && (now >= e.nextAsk || release)) {
		at := e.nextAsk
		if !active {
			return batch
		}
		if s.rr > 0 && e.l.Tokens() < e.low {
			// the next whole unit of refill
			at = min(at, now+int64(max(1-s.carry, 0)/s.rr*1e9)+1)
		}
		r.schedule(e, at)
		return batch
	}
	// The lease in use ends as the ask is sent (the store replaces it):
	// refilled until now; from now until the reply the host earns the
	// lesser of the old rate and the new (applyRate), which the store
	// reserved for it all along (the old until it served the ask, the
	// new from then): no round trip is lost, nothing is spent twice.
	e.rs.prev, e.rs.prevTo, e.rs.rr = e.rs.rr, e.rs.until, 0
	e.rs.backSent = e.rs.back
	e.held, e.charge, e.want = 0, 0, int64(e.rateDemand(now)*1000)
	if e.rs.prevTo > now {
		e.held = int64(e.rs.prev * 1000) // (kept if the key was flushed)
	}
	e.inBatch = true
	return append(batch, e)
}

// giveBack keeps n tokens e's local bucket dropped for its next ask to give
// back to the key's burst bucket (at most a burst: the store caps the
// bucket anyway). Tokens dropped are tokens the store handed out that no
// packet will spend: given back, the fleet gets them (the first host to
// ask for a new key, at 300/s of a 3 000/s rule, drew the whole burst
// with the whole rate and dropped it at its next grant's cap, 136), and
// the bound is the same (a token is spent once at most: the host holds
// it no more).
func (r *Rule) giveBack(e *entry, n int64) {
	if n > 0 {
		e.rs.back = min(e.rs.back+n, int64(r.size))
	}
}

// rateDemand is e's demand as a rate lease asks with it: est, but while
// e is young what it saw over at least a quarter of tau (est's 1 ms made
// one packet 1 000/s: the first asks of a key new to 1 000 hosts summed
// to hundreds of times the demand, and the shares computed with them
// were a fraction of the hosts' parts).
func (e *entry) rateDemand(now int64) float64 {
	d := e.rate
	if age := now - e.born; age < int64(tau*1e9) {
		d = max(d, float64(e.demandTotal)*1e9/float64(max(age, int64(tau*1e9/4))))
	}
	return d
}

// applyRate takes the store's reply to e's rate ask, received at now.
func (r *Rule) applyRate(e *entry, rep reply, now int64) {
	e.inBatch = false
	s := &e.rs
	s.back, s.backSent = max(s.back-s.backSent, 0), 0 // (given back)
	first := e.replied == 0
	until := e.sentAt + rep.leftUs*1000
	if end := min(now, s.prevTo); end > s.fillAt {
		s.carry += min(s.prev, float64(rep.granted)/1000) * float64(end-s.fillAt) / 1e9
	}
	if from := max(s.prevTo, e.born); s.prevTo != 0 && from < now {
		r.loss.unleased.Add(uint64(float64(rep.granted) * float64(now-from) / 1e9))
	}
	s.prev = 0
	s.rr, s.share, s.until, s.fillAt = float64(rep.granted)/1000, float64(rep.cap)/1000, until, now
	s.busy = rep.total >= r.rate/2
	b := r.rateCap(s.rr)
	if t := e.l.Tokens(); t > b {
		x := e.l.Expire()
		r.loss.dropped.Add(uint64(x - min(x, b)))
		r.giveBack(e, x-min(x, b))
		e.l.Grant(min(x, b), until)
	} else {
		e.l.Grant(0, until)
	}
	if rep.burst > 0 {
		// Burst tokens the store drew for it from the key's burst
		// bucket, up to the room it had when it asked (its bucket may
		// have filled since: the rest is dropped at the cap).
		n := min(rep.burst, max(b-e.l.Tokens(), 0))
		r.loss.capped.Add(uint64(rep.burst-n) * 1000)
		r.giveBack(e, rep.burst-n)
		if n > 0 {
			e.l.Grant(n, 0)
			r.granted.Add(uint64(n))
			r.burst.Add(uint64(n))
		}
	}
	e.lastTokens = e.l.Tokens()
	e.cap, e.hosts, e.replied = b, rep.hosts, now
	e.own, e.total = s.rr, r.rate
	// (the lead at most a quarter interval, as for the renewal below: a
	// lead of seconds on a loaded machine made every packet wake it)
	lead := min(r.c.lead(), r.c.interval/4)
	e.low = max(1, int64(s.rr*float64(lead)/1e9))
	e.l.SetLow(e.low)
	// (up to 2 % early: the hosts' turns drift apart, and the asks stay
	// within 1.2 × hosts ÷ interval with the re-asks below)
	next := now + r.c.interval - int64(0.02*float64(r.c.interval)*r.c.rng.Float64())
	d := e.rateDemand(now)
	// Again soon: after a quarter interval; while the key is young here
	// (its first interval), after a sixteenth for a few hosts, up to a
	// quarter for 16 hosts or more (hosts × I ÷ 64: the asks of a fleet's
	// start stay within a few × hosts ÷ interval). A young key's shares
	// are computed with the demands of the hosts' first asks, a packet
	// or two each: each host's true demand reaches the store only with
	// its next ask, and the rate a host was granted too much of comes
	// back only with its own next one; in e2e TestGlobalLimit's uneven
	// case (3 hosts, 6 000/s through one, 300/s through each other) that
	// took two or three quarter intervals, 0.81-0.92 of the ideal over
	// 5 s.
	soon := r.c.interval / 4
	young := now-e.born < r.c.interval
	if young {
		soon = min(r.c.interval/4, max(r.c.interval/16, r.c.interval*rep.hosts/64))
	}
	if short := s.share - s.rr; short > 0.25*s.share || short > 0.1*s.share && short > 0.02*r.rate {
		// less than its share (others still hold the rest): again soon
		// (short by a tenth of it only when that is 2 % of the rate:
		// the demands of hosts at 4 packets/s move by ±25 % between
		// asks, and 40 % of 1 000 hosts asked again each second for a
		// tenth of 2 packets/s, 1.45 × hosts ÷ interval in all)
		next = now + soon
		r.loss.short.Add(1)
	} else if s.rr > 2*d+r.mincap && (first || s.busy || young) {
		// More than twice its demand, at its first grant, while the
		// key is young here (the demands the others asked with were
		// young too, and the key may be busy yet: in e2e
		// TestGlobalLimit's uneven case, with only first grants and
		// busy keys asking again, the hosts at 300/s held 1 360/s
		// each for an interval, the host at 6 000/s the 270/s left),
		// or of a key whose demands may take the rate: again soon, to
		// give the rest back. The first host to ask for a key new to all is
		// granted a share computed before the others asked (at 1 000
		// hosts it took the whole rate, the others none, for 1.1 s),
		// and a host whose demand went elsewhere holds a share of the
		// demand it had. At its first grant after a sixteenth: the
		// others asked in the same round trip, and gave none of the
		// rate back until it asked again (at I/4 they came back as it
		// did, found it still held, and waited I/4 more: 0.00 of the
		// rate accepted from 0.5 to 1.5 s at 1 000 hosts).
		next = now + soon
		if first {
			next = now + r.c.interval/16
		}
		r.loss.over.Add(1)
	} else if free := float64(rep.waitUs) / 1000; free > 0.1*r.rate && d > 1.1*s.rr {
		// A tenth of the rate held by no lease, and a demand above
		// its rate: again soon, to take its share of it. Shares are
		// computed with the demands the hosts asked with; when these
		// fall (a key's first asks, demand gone elsewhere) the shares
		// granted before sum to less than the rate (0.71 of it for a
		// second at 1 000 hosts), and none of the hosts asked again.
		next = now + r.c.interval/4
		r.loss.free.Add(1)
	}
	// Before the lease ends by the lead (a poll and a few round trips),
	// at most a quarter interval: the lease lasts at least an interval
	// (the rest of its epoch and the next), so a renewal is never due
	// sooner than 3/4 of one; the round trips of 1 000 refreshers on two
	// loaded cores (0.4-0.7 s, a lead of 1.6-2.8 s) made almost every
	// renewal due at once.
	// (Never sooner than a sixteenth: a reply whose lease has nothing
	// left, which the script never gives, made e2e TestHostileStoreE2E's
	// host ask 1 000 times a second.)
	e.nextAsk, e.slot = max(min(next, until-lead), now+r.c.interval/16), false
	r.schedule(e, e.nextAsk)
	r.asks.Add(1)
}
