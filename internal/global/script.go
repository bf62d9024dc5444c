package global

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// leaseScript hands one host a lease of one flow key's budget. It runs on
// the store, atomically, on the store's clock (TIME): the hosts' clocks
// never enter the budget, only their own durations. Per flow key, a hash
// (KEYS[1]):
//
//	tk, ts      token bucket: tokens (may be below 0: credit charged) and the
//	            time of the last refill, µs
//	q           token bucket: the last slot given in the queue of visits, µs
//	w, c        fixed window: the window's index and what it has handed out
//	G, tG       every host's grants, decayed, and when (the shares' total)
//	g:ID        per host: its grants, decayed (for its share)
//
// and a sorted set (KEYS[2], KEY:h, the same slot): the hosts, scored by
// the store time of their last asks. No ask reads more than a bounded
// number of entries: the hosts are counted with ZCOUNT over the horizon
// (at most maxhosts others), at most 8 hosts whose time is more than the
// horizon away are dropped per ask (with their g: fields), and only this
// host's fields of the hash are read (HMGET). A host's cap is max(mincap,
// slack / hosts), and it is granted no more than its cap minus what it
// holds. (A host keeps what it was granted under an earlier, larger cap
// until its next ask.)
//
// The store may be written by others than packetshaper (see the package
// documentation, "A store written by others"): the script reads every field
// as untrusted and never takes what it cannot have written for a full
// bucket. A field that is not a finite number, or is negative where a
// count or time cannot be, counts as spent (no tokens, the window used
// up); so does a token count above the burst, and a missing state when the
// key exists or this host held a lease of it within the horizon (the key
// cannot have expired: it was flushed, deleted or lost). A time ahead of
// the store's clock is its now (no refill until then; a window more than
// one ahead is spent); a slot further ahead than the hosts' queue can be
// is clamped to it. A hash of more than 16 + maxhosts fields, or a hosts
// set of more than maxhosts + 64 members, holds fakes and is dropped (the
// budget's state and this host's written again). Decayed grants are kept
// between 0 and size + 2 × rate × decay.
//
// KEYS: the key, its hosts set. ARGV: algorithm (0 token bucket, 1 fixed
// window), rate (cost units per second), burst (token bucket) or limit per
// window (fixed window), window (µs), slack (cost units), mincap (cost
// units), host id, held (what the host holds now, >= 0), charge (credit it
// spent, taken from the budget whatever it holds), want, horizon (µs),
// decay (µs, the shares' time constant), known (1 if this host had a reply
// for the key within the horizon), maxhosts (the most other hosts counted).
//
// Returns {granted, hosts, cap, wait µs, window left µs, own share ×1000,
// all shares ×1000}: wait is how long the host should wait before asking
// again when the bucket cannot serve its ask again: with a token bucket
// until its slot in the key's queue of visits (after the last slot given
// by the time the bucket takes to refill this host's ask, at most half a
// bucket: the hosts come back one after another, each finding about its
// ask, so the asks per second do not grow with the packets); with a fixed
// window that ran out, its end. window
// left is the time to the end of the fixed window the grant belongs to.
const leaseScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local algo = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local size = tonumber(ARGV[3])
local win = tonumber(ARGV[4])
local slack = tonumber(ARGV[5])
local mincap = tonumber(ARGV[6])
local me = ARGV[7]
local held = tonumber(ARGV[8])
local charge = tonumber(ARGV[9])
local want = tonumber(ARGV[10])
local horizon = tonumber(ARGV[11])
local decay = tonumber(ARGV[12])
local known = ARGV[13] == '1'
local maxhosts = tonumber(ARGV[14])
local have = tonumber(ARGV[15]) or 0
local back = tonumber(ARGV[16]) or 0

-- Lua would write numbers with 14 digits: times in µs need 16.
local function num(x) return string.format('%.17g', x) end
local function int(x) return string.format('%d', x) end
-- Others may have written the key: every field read is checked. fin is a
-- field as a finite number, nil if missing, not a number, NaN or infinite.
local function fin(s)
  local x = tonumber(s)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return nil end
  return x
end
-- A time (µs): nil unless finite and not negative; one ahead of the
-- store's clock is now (a clock that went back grants nothing, and a
-- forged future holds nothing up).
local function time(s)
  local x = fin(s)
  if x == nil or x < 0 then return nil end
  return math.min(x, now)
end
-- A host's decayed grants: from 0 to more than any host is granted.
local gmax = size + 2 * rate * decay / 1e6
local function grants(s)
  local x = fin(s)
  if x == nil or x < 0 then return 0 end
  return math.min(x, gmax)
end

` + rateLua + `
-- The key's hash: the budget's state, G and tG (every host's grants,
-- decayed, and when), and one field per host, g:ID (its grants,
-- decayed). KEYS[2], a sorted set: the hosts by the store time of their
-- last ask. Nothing here
-- reads more than a bounded number of entries: the hosts are counted with
-- ZCOUNT, the expired ones dropped at most 8 at a time.
local hz = KEYS[2]
local len = redis.call('HLEN', KEYS[1])
local exists = len > 0
local f = {}
local names = {'tk', 'ts', 'w', 'c', 'q', 'G', 'tG', 'g:' .. me}
local v = redis.call('HMGET', KEYS[1], unpack(names))
for i = 1, #names do if v[i] then f[names[i]] = v[i] end end
-- More entries than maxhosts hosts write: fake ones. Drop them (the
-- budget's state and this host's are written again below; real hosts are
-- counted again at their next asks).
if len > 16 + maxhosts then redis.call('DEL', KEYS[1]) end
if redis.call('ZCARD', hz) > maxhosts + 64 then redis.call('DEL', hz) end
-- A key gone (a FLUSHALL, a DEL, a store that lost it) while this host
-- held a lease of it within the horizon, or an existing key that lacks
-- its state, restarts empty: only a key no one used for its TTL is new.
local fresh = not exists and not known

local cw, c
if algo == 1 then
  local w = math.floor(now / win)
  cw, c = fin(f.w), fin(f.c)
  if cw == nil or cw < 0 or cw ~= math.floor(cw) or cw > w + 1 then
    -- no window, or a forged one: this window is spent (a new key's is
    -- not)
    cw = w
    if fresh then c = 0 else c = size end
  elseif cw < w then
    cw = w; c = 0
  elseif c == nil or c < 0 then
    -- (a store clock that went back less than a window stays in the
    -- newer window)
    c = size
  end
end

-- Hosts that have not asked within the horizon (or whose time is further
-- ahead: forged), at most 8 of each per ask, are forgotten.
local lo, hi = now - horizon, now + horizon
local function drop(ids)
  for i = 1, #ids do
    local id = ids[i]
    if id ~= me then
      redis.call('ZREM', hz, id)
      redis.call('HDEL', KEYS[1], 'g:' .. id)
    end
  end
end
drop(redis.call('ZRANGEBYSCORE', hz, '-inf', '(' .. int(lo), 'LIMIT', 0, 8))
drop(redis.call('ZRANGEBYSCORE', hz, '(' .. int(hi), '+inf', 'LIMIT', 0, 8))

local myat = time(redis.call('ZSCORE', hz, me)) or now
redis.call('ZADD', hz, int(now), me)
local n = math.max(1, math.min(redis.call('ZCOUNT', hz, int(lo), int(hi)), maxhosts + 1))
local mine = grants(f['g:' .. me]) * math.exp(-(now - myat) / decay)
local total = fin(f.G)
if total == nil or total < 0 then total = 0 end
total = math.min(total, gmax * (maxhosts + 1)) * math.exp(-(now - (time(f.tG) or now)) / decay)
total = math.max(total, mine)

local cap = math.max(mincap, slack / n)
local room = cap - held
if room < 0 then room = 0 end
local ask = math.min(want, room)

local g, wait, left, ttl, state = 0, 0, 0, 0, nil
if algo == 0 then
  local tk, ts = fin(f.tk), time(f.ts)
  if tk == nil then
    -- missing or not a number: empty, unless the key is new
    if fresh then tk = size else tk = 0 end
    ts = now
  elseif tk > size then
    -- more than a bucket holds: forged
    tk = 0
  end
  -- no debt beyond what the credit of every host counted can make
  tk = math.max(tk, -(size + (maxhosts + 1) * mincap))
  if ts == nil then ts = now end
  if now > ts then
    tk = math.min(size, tk + (now - ts) * rate / 1e6)
    ts = now
  end
  tk = tk - charge
  g = math.floor(math.min(ask, math.max(tk, 0)))
  tk = tk - g
  local q = fin(f.q)
  if q == nil or q < now then q = now end
  -- (a slot further ahead than any the hosts counted can have been
  -- given is forged)
  q = math.min(q, now + n * size / rate * 1e6)
  if g < ask or tk < ask or q > now then
    -- The bucket cannot serve this ask again (or others are queued for
    -- what it holds): the host's next visit
    -- gets a slot in the key's queue of visits (q, the last slot given),
    -- after the one before by the time the bucket takes to refill its
    -- ask, at most half a bucket (a visit late by up to that loses no
    -- refill). The hosts come back one after another, each finding about
    -- its ask: a key above its limit costs about rate / ask visits a
    -- second, whatever the packets. (Not the refill of what it took: a
    -- host served short would come back as short after the one before,
    -- and find as little again, each turn.)
    local need = math.min(ask, size / 2)
    local slot
    if q > now then
      slot = q + need / rate * 1e6
    else
      slot = now + math.max(need - tk, 0) / rate * 1e6
    end
    wait = slot - now
    q = slot
  end
  state = {'tk', num(tk), 'ts', int(ts), 'q', int(q)}
  ttl = (size - tk) / rate * 1e6
else
  left = (cw + 1) * win - now
  c = c + charge
  g = math.floor(math.min(ask, math.max(size - c, 0)))
  c = c + g
  if g < ask then wait = left end
  state = {'w', int(cw), 'c', num(c), 'q', int(now)}
  ttl = left
end
mine = mine + g
total = total + g
redis.call('HSET', KEYS[1], state[1], state[2], state[3], state[4], state[5], state[6],
  'g:' .. me, num(mine), 'G', num(total), 'tG', int(now))
local ms = math.ceil((ttl + horizon) / 1000) + 1000
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('PEXPIRE', hz, ms)
return {g, n, math.floor(cap), math.floor(wait), math.floor(left), math.floor(mine * 1000), math.floor(total * 1000)}
`

var script = redis.NewScript(leaseScript)

// askArgs are an ask's arguments, the script's ARGV.
type askArgs struct {
	fixedWindow        bool
	rateLease          bool // algorithm 2 (rate.go); windowUs the interval
	rate, size         float64
	windowUs           int64
	slack, mincap      float64
	host               string
	held, charge, want int64
	horizonUs, decayUs int64
	known              bool
	maxHosts           int64
	have               int64 // rate leases: the tokens the host holds (for the burst)
	back               int64 // rate leases: tokens the host dropped, back to the burst bucket
}

// maxHosts is the most hosts besides the asker that the script counts for
// one key (and so the least cap is slack / (maxHosts + 1)); a key's hash
// with more fields than that many hosts write is taken as tampered with.
const maxHosts = 16384

func (a *askArgs) argv() []any {
	algo := 0
	if a.fixedWindow {
		algo = 1
	}
	if a.rateLease {
		algo = 2
	}
	known := 0
	if a.known {
		known = 1
	}
	mh := a.maxHosts
	if mh <= 0 {
		mh = maxHosts
	}
	return []any{algo, ftoa(a.rate), ftoa(a.size), a.windowUs, ftoa(a.slack), ftoa(a.mincap),
		a.host, a.held, a.charge, a.want, a.horizonUs, a.decayUs, known, mh, a.have, a.back}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// reply is the script's answer.
type reply struct {
	granted, hosts, cap int64
	waitUs, leftUs      int64
	own, total          float64 // decayed grant sums
	burst               int64   // rate leases: burst tokens drawn (an 8th element; 0 without)
}

func parseReply(v any) (reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 7 && len(a) != 8 {
		return reply{}, fmt.Errorf("global: unexpected reply %v from the lease script", v)
	}
	var n [8]int64
	for i, x := range a {
		if n[i], ok = x.(int64); !ok {
			return reply{}, fmt.Errorf("global: unexpected reply %v from the lease script", v)
		}
	}
	return reply{granted: n[0], hosts: n[1], cap: n[2], waitUs: n[3], leftUs: n[4],
		own: float64(n[5]) / 1000, total: float64(n[6]) / 1000, burst: n[7]}, nil
}
