package global

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// The store may be written by others than packetshaper (anyone with write
// access to it): these tests write rogue state between the script's runs
// and check that it never grants more than the bound, and that the real
// hosts keep their fair share.

// storeNow is the store's clock, µs (TIME).
func storeNow(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// TestScriptRogueState: a token bucket's state written by another: a
// token count that is not a number, infinite, or more than the burst, a
// time that is not one, negative or in the future, a state missing from an
// existing key or from a key this host leased within the horizon: each
// counts as an empty bucket (no refill from a forged time), never a full
// one. A future time holds nothing up past the store's now.
func TestScriptRogueState(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	ctx := context.Background()
	key := "t:{rogue}"
	known := tb("a", 0, 0, 10)
	known.known = true
	for _, tc := range []struct {
		name   string
		fields func(now int64) []any // nil: the key is missing
		a      askArgs
		want   int64
	}{
		{"tk huge", func(now int64) []any { return []any{"tk", "1e9", "ts", now} }, tb("a", 0, 0, 10), 0},
		{"tk nan", func(now int64) []any { return []any{"tk", "nan", "ts", now} }, tb("a", 0, 0, 10), 0},
		{"tk inf", func(now int64) []any { return []any{"tk", "inf", "ts", now} }, tb("a", 0, 0, 10), 0},
		{"tk -inf", func(now int64) []any { return []any{"tk", "-inf", "ts", now} }, tb("a", 0, 0, 10), 0},
		{"tk not a number", func(now int64) []any { return []any{"tk", "lots", "ts", now} }, tb("a", 0, 0, 10), 0},
		{"tk missing", func(now int64) []any { return []any{"ts", now} }, tb("a", 0, 0, 10), 0},
		{"only a fake host", func(now int64) []any { return []any{"a:x", now - 10_000_000} }, tb("a", 0, 0, 10), 0},
		{"ts nan", func(now int64) []any { return []any{"tk", 0, "ts", "nan"} }, tb("a", 0, 0, 10), 0},
		{"ts inf", func(now int64) []any { return []any{"tk", 0, "ts", "inf"} }, tb("a", 0, 0, 10), 0},
		{"ts -inf", func(now int64) []any { return []any{"tk", 0, "ts", "-inf"} }, tb("a", 0, 0, 10), 0},
		{"ts negative", func(now int64) []any { return []any{"tk", 0, "ts", "-1000000000000000000"} }, tb("a", 0, 0, 10), 0},
		{"ts not a number", func(now int64) []any { return []any{"tk", 0, "ts", "then"} }, tb("a", 0, 0, 10), 0},
		{"ts future", func(now int64) []any { return []any{"tk", 0, "ts", now + 3600_000_000} }, tb("a", 0, 0, 10), 0},
		{"missing, leased within the horizon", nil, known, 0},
		{"missing, new", nil, tb("a", 0, 0, 10), 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Del(ctx, key)
			if tc.fields != nil {
				if err := c.HSet(ctx, key, tc.fields(storeNow(t, c))...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r := runScript(t, c, key, tc.a)
			if r.granted != tc.want {
				t.Fatalf("granted %d, want %d: %s", r.granted, tc.want, fmtReply(r))
			}
			tk, err := c.HGet(ctx, key, "tk").Float64()
			if err != nil || math.IsNaN(tk) || tk > 20 || tk < -20 {
				t.Errorf("tokens left %v (%v), want a number of at most the burst", tk, err)
			}
			if ts, _ := c.HGet(ctx, key, "ts").Int64(); ts <= 0 || ts > storeNow(t, c) {
				t.Errorf("time left %d, want the store's now", ts)
			}
		})
	}
	// A future time is clamped to the store's now: the bucket refills
	// from then at 100/s (what the store's clock shows passed, ± 1), not
	// from an hour later.
	c.Del(ctx, key)
	t0 := storeNow(t, c)
	c.HSet(ctx, key, "tk", 0, "ts", t0+3600_000_000)
	runScript(t, c, key, tb("a", 0, 0, 10))
	for t1 := storeNow(t, c); storeNow(t, c)-t1 < 30_000; {
		time.Sleep(5 * time.Millisecond)
	}
	r := runScript(t, c, key, tb("a", 0, 0, 10))
	most := min(10, (storeNow(t, c)-t0)*100/1_000_000+1)
	if r.granted < 1 || r.granted > most {
		t.Errorf("after a future time: %s, want 1 to %d granted (the refill since the store's now)", fmtReply(r), most)
	}
	// A forged debt beyond any that the hosts' credit can make is cut to
	// it: the bucket is not stuck for ever.
	c.Del(ctx, key)
	c.HSet(ctx, key, "tk", "-1e300", "ts", storeNow(t, c))
	runScript(t, c, key, tb("a", 0, 0, 10))
	if tk, _ := c.HGet(ctx, key, "tk").Float64(); tk < -(20 + (maxHosts+1)*1) {
		t.Errorf("tokens %v after a forged debt of -1e300, want at least -(burst + (maxHosts+1) × mincap)", tk)
	}
}

// TestScriptRogueWindow: a fixed window's state written by another: a
// count that is negative, not a number, a window that is not one or far in
// the future, a state missing from a key this host leased: the window is
// spent, never fresh; the next window starts afresh.
func TestScriptRogueWindow(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	ctx := context.Background()
	key := "t:{rogue-fw}"
	const win = 1_000_000 // µs
	fw := func(known bool) askArgs {
		return askArgs{fixedWindow: true, rate: 10, size: 10, windowUs: win, slack: 100, mincap: 1, host: "a",
			want: 5, horizonUs: 2_500_000, decayUs: 5_000_000, known: known}
	}
	for _, tc := range []struct {
		name   string
		fields func(w int64) []any
		known  bool
	}{
		{"count negative", func(w int64) []any { return []any{"w", w, "c", "-1e9"} }, false},
		{"count nan", func(w int64) []any { return []any{"w", w, "c", "nan"} }, false},
		{"count missing", func(w int64) []any { return []any{"w", w} }, false},
		{"window not a number", func(w int64) []any { return []any{"w", "now", "c", 0} }, false},
		{"window inf", func(w int64) []any { return []any{"w", "inf", "c", 0} }, false},
		{"window far ahead", func(w int64) []any { return []any{"w", w + 1_000_000, "c", 0} }, false},
		{"missing, leased within the horizon", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The state written and the ask in one window of the
			// store's clock (again if a stall put them in two).
			var r reply
			for try := 0; ; try++ {
				c.Del(ctx, key)
				w := storeNow(t, c) / win
				if tc.fields != nil {
					c.HSet(ctx, key, tc.fields(w)...)
				}
				r = runScript(t, c, key, fw(tc.known))
				if storeNow(t, c)/win == w || try == 10 {
					break
				}
			}
			if r.granted != 0 || r.leftUs <= 0 || r.leftUs > win {
				t.Fatalf("%s, want nothing granted and at most a window left", fmtReply(r))
			}
		})
	}
	// The window is spent until its end, not for ever.
	c.Del(ctx, key)
	c.HSet(ctx, key, "w", "nan", "c", 0)
	r := runScript(t, c, key, fw(false))
	time.Sleep(time.Duration(r.leftUs+2000) * time.Microsecond)
	if r := runScript(t, c, key, fw(false)); r.granted != 5 {
		t.Errorf("the next window: %s, want 5 granted", fmtReply(r))
	}
}

// TestScriptFakeHosts: hosts written by another (members of the key's
// hosts set, with their g: fields in the hash): fresh ones are counted, at
// most maxHosts, shrinking the caps (never below one packet) but never the
// budget; ones whose time is more than the horizon away (past or ahead)
// are not counted and are dropped, 8 an ask; more entries than maxHosts
// hosts write (in the set or the hash) are dropped at the next ask (the
// bucket's state kept), never read: the ask costs the same whatever was
// written.
func TestScriptFakeHosts(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	ctx := context.Background()
	key := "t:{fake}"
	hz := scriptKeys(key)[1]
	fake := func(n int, at func(now int64, i int) float64, fields bool) {
		t.Helper()
		c.Del(ctx, scriptKeys(key)...)
		now := storeNow(t, c)
		c.HSet(ctx, key, "tk", 20, "ts", now)
		var zs []redis.Z
		var args []any
		for i := range n {
			id := "f" + strconv.Itoa(i)
			zs = append(zs, redis.Z{Score: at(now, i), Member: id})
			args = append(args, "g:"+id, "1e300")
			if len(zs) >= 1000 || i == n-1 {
				if err := c.ZAdd(ctx, hz, zs...).Err(); err != nil {
					t.Fatal(err)
				}
				if fields {
					if err := c.HSet(ctx, key, args...).Err(); err != nil {
						t.Fatal(err)
					}
				}
				zs, args = zs[:0], args[:0]
			}
		}
	}
	fresh := func(now int64, _ int) float64 { return float64(now) }
	for _, tc := range []struct {
		name      string
		n         int
		at        func(now int64, i int) float64
		fields    bool // their g: fields in the hash too
		maxHosts  int64
		hosts     int64 // counted, with the asker
		granted   int64
		maxZ      int64 // entries left in the hosts set
		maxFields int64
	}{
		// 5000 fresh fakes: counted (5001 hosts), the cap one packet.
		{"5000 fresh", 5000, fresh, true, 0, 5001, 1, 5001, 6 + 5000},
		{"5000 expired", 5000, func(now int64, _ int) float64 { return float64(now - 10_000_000) }, false, 0, 1, 10, 5001 - 8, 6},
		{"200 far ahead", 200, func(now int64, _ int) float64 { return float64(now + 3600_000_000) }, false, 0, 1, 10, 201 - 8, 6},
		{"200 infinite", 200, func(_ int64, i int) float64 { return []float64{math.Inf(1), math.Inf(-1)}[i%2] }, false, 0, 1, 10, 201 - 16, 6},
		// Within maxHosts + 64 entries, fresh: counted, at most maxHosts.
		{"8 fresh, 8 counted", 8, fresh, false, 8, 9, 1, 9, 6},
		{"40 fresh, 8 counted", 40, fresh, false, 8, 9, 1, 41, 6},
		// More: a flood, dropped (the asker alone, its whole cap).
		{"100 fresh, a flood", 100, fresh, false, 8, 1, 10, 1, 6},
		{"5000 fields, a flood", 5000, func(now int64, _ int) float64 { return float64(now - 10_000_000) }, true, 8, 1, 10, 1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake(tc.n, tc.at, tc.fields)
			a := tb("a", 0, 0, 10)
			a.maxHosts = tc.maxHosts
			r := runScript(t, c, key, a)
			if r.hosts != tc.hosts || r.granted != tc.granted {
				t.Errorf("%s, want %d hosts and %d granted", fmtReply(r), tc.hosts, tc.granted)
			}
			if r.total > 1e9 {
				t.Errorf("shares total %.0f: a fake host's grants not bounded", r.total)
			}
			if n := c.ZCard(ctx, hz).Val(); n > tc.maxZ {
				t.Errorf("%d hosts left in the set, want at most %d", n, tc.maxZ)
			}
			if n := c.HLen(ctx, key).Val(); n > tc.maxFields {
				t.Errorf("%d fields left, want at most %d", n, tc.maxFields)
			}
			if tk, _ := c.HGet(ctx, key, "tk").Float64(); math.Abs(tk-float64(20-r.granted)) > 1 {
				t.Errorf("tokens %v left, want the bucket's 20 less the %d granted", tk, r.granted)
			}
		})
	}
}

// TestRogueWriter: three hosts share one key at saturation (each offered
// the rate) while another client writes the key every 0.2 s, up to 6 times
// (FLUSHALL, a huge token count, token counts and times that are not
// numbers, negative or future times, 5000 fake hosts): the hosts accept no more than the
// bound burst + rate × T + N × S (+ a packet of credit per host and
// write), at least half of burst + rate × T, and each gets a fair part.
func TestRogueWriter(t *testing.T) {
	testutil.NeedExclusive(t, "the real hosts' share of the grants is counted over 3 s of leases refreshed on time")
	s := testutil.StartRedis(t)
	const rate, burst, slack = 2000.0, 400.0, 0.1
	limit := shaper.Config{Rate: rate, Burst: burst, GlobalSlack: slack}
	rc := rawClient(t, s.Addr())
	ctx := context.Background()
	hset := func(fields ...func(now int64) any) func(key string) {
		return func(key string) {
			now := storeNow(t, rc)
			args := make([]any, len(fields))
			for i, f := range fields {
				args[i] = f(now)
			}
			rc.HSet(ctx, key, args...)
		}
	}
	val := func(v any) func(int64) any { return func(int64) any { return v } }
	for _, tc := range []struct {
		name  string
		write func(key string)
		every time.Duration
		rate  bool // rate leases (rate.go), not token leases
	}{
		{"flushall", func(string) { rc.FlushAll(ctx) }, 200 * time.Millisecond, false},
		// Rate leases: a flush must not starve the hosts (their leases
		// before stand until they end) nor break the bound (the store
		// grants again only once those have ended); forged sums and
		// epochs are the rate spent, for two epochs at most.
		{"rate flushall", func(string) { rc.FlushAll(ctx) }, 200 * time.Millisecond, true},
		{"rate Rc nan", hset(val("Rc"), val("nan")), 200 * time.Millisecond, true},
		{"rate e future", hset(val("e"), val("1e15")), 200 * time.Millisecond, true},
		// The burst bucket's count forged (too large, not a number) is
		// empty; its time forged, no refill.
		{"rate b huge", hset(val("b"), val("1e9")), 200 * time.Millisecond, true},
		{"rate b nan, bs future", hset(val("b"), val("nan"), val("bs"), func(now int64) any { return now + 3600_000_000 }), 200 * time.Millisecond, true},
		{"tk huge", hset(val("tk"), val("1e9")), 200 * time.Millisecond, false},
		{"tk nan", hset(val("tk"), val("nan")), 200 * time.Millisecond, false},
		{"tk inf", hset(val("tk"), val("inf")), 200 * time.Millisecond, false},
		{"ts nan", hset(val("ts"), val("nan")), 200 * time.Millisecond, false},
		{"ts negative", hset(val("ts"), val("-1e18")), 200 * time.Millisecond, false},
		{"ts future", hset(val("ts"), func(now int64) any { return now + 3600_000_000 }), 200 * time.Millisecond, false},
		// More fake hosts than maxHosts + 64 in the key's set (with
		// their fields): dropped at the next ask, never counted. (Fewer
		// are counted, up to maxHosts: they shrink the caps, to one
		// packet at worst, never the budget; see RELIABILITY.md.)
		{"20000 fake hosts", func(key string) {
			now := storeNow(t, rc)
			var args []any
			var zs []redis.Z
			for i := range maxHosts + 4000 {
				id := "fake" + strconv.Itoa(i)
				args = append(args, "g:"+id, 1000)
				zs = append(zs, redis.Z{Score: float64(now), Member: id})
				if len(zs) >= 2000 {
					rc.HSet(ctx, key, args...)
					rc.ZAdd(ctx, scriptKeys(key)[1], zs...)
					args, zs = args[:0], zs[:0]
				}
			}
			rc.HSet(ctx, key, args...)
			rc.ZAdd(ctx, scriptKeys(key)[1], zs...)
		}, 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc.FlushAll(ctx)
			var hosts []*host
			for range 3 {
				// (a refresh interval of the slack, 0.1 s: the hosts
				// visit the bucket every 0.1 s, and a write that
				// empties it loses at most that refill)
				hosts = append(hosts, newHost(t, Config{Addrs: []string{s.Addr()}, KeyPrefix: "t:", Interval: 100 * time.Millisecond,
					TokenLeases: !tc.rate}, limit))
			}
			keys := []flows.Key{key(1)}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var wg sync.WaitGroup
			start := time.Now()
			for _, h := range hosts {
				wg.Add(1)
				go func() { defer wg.Done(); h.drive(runCtx, keys, rate, 0) }()
			}
			// The rogue writes once the hosts hold leases, a bounded
			// number of times.
			var name string
			for deadline := time.Now().Add(5 * time.Second); name == ""; time.Sleep(10 * time.Millisecond) {
				if ks := rc.Keys(ctx, "t:*}").Val(); len(ks) == 1 {
					name = ks[0]
				} else if time.Now().After(deadline) {
					cancel()
					wg.Wait()
					t.Fatalf("no key in the store: %v", ks)
				}
			}
			time.Sleep(300 * time.Millisecond)
			writes := 0
			// Up to 6 writes (3 of the 20 000 fake hosts) in 1.2 s: each
			// write is one chance to break the bound; more of the same
			// show nothing new.
			for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end) && writes < 6; writes++ {
				tc.write(name)
				time.Sleep(tc.every)
			}
			time.Sleep(300 * time.Millisecond)
			cancel()
			wg.Wait()
			secs := time.Since(start).Seconds()
			var total int64
			per := make([]int64, len(hosts))
			for i, h := range hosts {
				per[i] = h.accepted.Load()
				total += per[i]
			}
			want := burst + rate*secs
			bound := want + 3*slack*rate + 3 + 3*float64(writes)
			t.Logf("%d writes: accepted %d (per host %v) in %.2f s: burst + rate × T = %.0f (%.2fx), bound %.0f",
				writes, total, per, secs, want, float64(total)/want, bound)
			if float64(total) > bound {
				t.Errorf("accepted %d, over the bound %.0f (%.2fx burst + rate × T)", total, bound, float64(total)/want)
			}
			floor := 0.5
			if tc.rate {
				floor = 0.75 // (0.62 when a flush cost the renewing hosts their leases)
			}
			if float64(total) < floor*want {
				t.Errorf("accepted %d, under %.2f of burst + rate × T (%.0f): the real hosts starve", total, floor, want)
			}
			for i, n := range per {
				if float64(n) < 0.15*float64(total) {
					t.Errorf("host %d accepted %d of %d: not its fair part (a third)", i, n, total)
				}
			}
			for i, h := range hosts {
				if st := h.r.Stats(); st.Errors != 0 {
					t.Logf("host %d: %+v, last error %s", i, st, h.c.Stats().LastError)
				}
			}
		})
	}
}
