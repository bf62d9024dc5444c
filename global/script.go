package global

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// leaseScript hands one host a lease of one flow key's budget. It runs on
// the store, atomically, on the store's clock (TIME): the hosts' clocks
// never enter the budget, only their own durations. One key per flow key,
// a hash:
//
//	tk, ts      token bucket: tokens (may be below 0: credit charged) and the
//	            time of the last refill, µs
//	w, c        fixed window: the window's index and what it has handed out
//	a:ID        per host: the store time of its last ask, µs
//	g:ID        per host: its grants, decayed (for its share)
//	s:ID        per host: when it was last granted less than it asked
//
// A host that has not asked for longer than the horizon holds nothing (its
// leases expired before that on its own clock) and is forgotten. The hosts
// that asked within the horizon share the slack: a host's cap is
// max(mincap, slack / hosts), and it is granted no more than its cap minus
// what it holds. (A host keeps what it was granted under an earlier, larger
// cap until its next ask: while hosts arrive, together they may hold more
// than the slack, for at most a lease's life; refusing the newcomers
// instead would starve them until the first one spent its lease.)
//
// KEYS[1]: the key. ARGV: algorithm (0 token bucket, 1 fixed window), rate
// (cost units per second), burst (token bucket) or limit per window (fixed
// window), window (µs), slack (cost units), mincap (cost units), host id,
// held (what the host holds now, >= 0), charge (credit it spent, taken from
// the budget whatever it holds), want, horizon (µs), decay (µs, the shares'
// time constant).
//
// Returns {granted, hosts, cap, wait µs, window left µs, own share ×1000,
// all shares ×1000}: wait is how long the host should wait before asking
// again when the bucket cannot serve its ask again: with a token bucket
// until its ask may have refilled, in turn with the other hosts that went
// short lately (short hosts × ask / rate, less what the bucket holds: hosts
// that all go short take turns, each getting about its ask, so the asks per
// second do not grow with the packets), at most half the time until the
// bucket would be full (so that a late ask loses no tokens); with a fixed
// window that ran out, its end. window left is the time to
// the end of the fixed window the grant belongs to.
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

-- Lua would write numbers with 14 digits: times in µs need 16.
local function num(x) return string.format('%.17g', x) end
local function int(x) return string.format('%d', x) end

local h = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #h, 2 do f[h[i]] = h[i + 1] end

local cw, c = tonumber(f.w), tonumber(f.c) or 0
if algo == 1 then
  local w = math.floor(now / win)
  -- a store clock that went back stays in the newer window
  if cw == nil or w > cw then cw = w; c = 0 end
end

local n, total, short = 1, 0, 0
local gone = {}
for k, v in pairs(f) do
  if string.sub(k, 1, 2) == 'a:' then
    local id = string.sub(k, 3)
    if id ~= me then
      local at = tonumber(v)
      if now - at > horizon then
        gone[#gone + 1] = k
        gone[#gone + 1] = 'g:' .. id
        gone[#gone + 1] = 's:' .. id
      else
        n = n + 1
        total = total + (tonumber(f['g:' .. id]) or 0) * math.exp(-math.max(now - at, 0) / decay)
        if (tonumber(f['s:' .. id]) or 0) > now - horizon / 2 then short = short + 1 end
      end
    end
  end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
local myat = tonumber(f['a:' .. me]) or now
local mine = (tonumber(f['g:' .. me]) or 0) * math.exp(-math.max(now - myat, 0) / decay)

local cap = math.max(mincap, slack / n)
local room = cap - held
if room < 0 then room = 0 end
local ask = math.min(want, room)

local g, wait, left, ttl, state = 0, 0, 0, 0, nil
if algo == 0 then
  local tk, ts = tonumber(f.tk), tonumber(f.ts)
  if tk == nil then tk = size; ts = now end
  if now > ts then
    tk = math.min(size, tk + (now - ts) * rate / 1e6)
    ts = now
  end
  tk = tk - charge
  g = math.floor(math.min(ask, math.max(tk, 0)))
  tk = tk - g
  if g < ask then short = short + 1 end
  if g < ask or tk < ask then
    -- the bucket cannot serve this ask again: come back when it may,
    -- taking turns with the hosts that went short too, but well before
    -- it would be full (half way: late asks lose no tokens)
    wait = (math.max(short, 1) * ask - math.max(tk, 0)) / rate * 1e6
    local full = (size - tk) / rate * 1e6 / 2
    if wait > full then wait = full end
  end
  state = {'tk', num(tk), 'ts', int(ts)}
  ttl = (size - tk) / rate * 1e6
else
  left = (cw + 1) * win - now
  c = c + charge
  g = math.floor(math.min(ask, math.max(size - c, 0)))
  c = c + g
  if g < ask then wait = left end
  state = {'w', int(cw), 'c', num(c)}
  ttl = left
end
mine = mine + g
total = total + mine
local s = 0
if g < ask then s = now end
redis.call('HSET', KEYS[1], state[1], state[2], state[3], state[4],
  'a:' .. me, int(now), 'g:' .. me, num(mine), 's:' .. me, int(s))
redis.call('PEXPIRE', KEYS[1], math.ceil((ttl + horizon) / 1000) + 1000)
return {g, n, math.floor(cap), math.floor(wait), math.floor(left), math.floor(mine * 1000), math.floor(total * 1000)}
`

var script = redis.NewScript(leaseScript)

// askArgs are an ask's arguments, the script's ARGV.
type askArgs struct {
	fixedWindow        bool
	rate, size         float64
	windowUs           int64
	slack, mincap      float64
	host               string
	held, charge, want int64
	horizonUs, decayUs int64
}

func (a *askArgs) argv() []any {
	algo := 0
	if a.fixedWindow {
		algo = 1
	}
	return []any{algo, ftoa(a.rate), ftoa(a.size), a.windowUs, ftoa(a.slack), ftoa(a.mincap),
		a.host, a.held, a.charge, a.want, a.horizonUs, a.decayUs}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// reply is the script's answer.
type reply struct {
	granted, hosts, cap int64
	waitUs, leftUs      int64
	own, total          float64 // decayed grant sums
}

func parseReply(v any) (reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 7 {
		return reply{}, fmt.Errorf("global: unexpected reply %v from the lease script", v)
	}
	var n [7]int64
	for i, x := range a {
		if n[i], ok = x.(int64); !ok {
			return reply{}, fmt.Errorf("global: unexpected reply %v from the lease script", v)
		}
	}
	return reply{granted: n[0], hosts: n[1], cap: n[2], waitUs: n[3], leftUs: n[4],
		own: float64(n[5]) / 1000, total: float64(n[6]) / 1000}, nil
}
