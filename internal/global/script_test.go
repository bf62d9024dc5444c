package global

import (
	"context"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// tb is a token bucket's ask: 100/s, burst 20, slack 10, one packet least.
func tb(host string, held, charge, want int64) askArgs {
	return askArgs{rate: 100, size: 20, slack: 10, mincap: 1, host: host, held: held, charge: charge, want: want,
		horizonUs: 2_500_000, decayUs: 5_000_000}
}

// TestScriptTokenBucket walks one key's bucket through its edges, on the
// store's clock: a new key holds the burst, grants are capped by the cap,
// an empty bucket grants nothing and says how long to wait, refill at the
// rate, a charge that makes a debt, and the debt paid back before any
// grant.
func TestScriptTokenBucket(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	key := "t:{k}"
	step := func(i int, a askArgs, check func(r reply) bool) reply {
		t.Helper()
		r := runScript(t, c, key, a)
		if !check(r) {
			t.Fatalf("step %d: ask(held %d, charge %d, want %d) = %s", i, a.held, a.charge, a.want, fmtReply(r))
		}
		return r
	}
	// Alone, a host's cap is the whole slack (10): a new bucket (20)
	// grants 10 of a want of 15, and can serve it again.
	step(1, tb("a", 0, 0, 15), func(r reply) bool { return r.granted == 10 && r.hosts == 1 && r.cap == 10 && r.waitUs == 0 })
	// Holding 10, the cap leaves no room.
	step(2, tb("a", 10, 0, 5), func(r reply) bool { return r.granted == 0 })
	// Having spent them: 10 more, and the bucket is empty: come back
	// when 10 have refilled (0.1 s).
	step(3, tb("a", 0, 0, 10), func(r reply) bool { return r.granted == 10 && r.waitUs > 90_000 && r.waitUs <= 100_000 })
	// Empty, and no visit queued (a host asks again only at its slot:
	// the test's ask is early): nothing, and a wait for its ask to
	// refill: 10 / 100 s.
	// (Half a token short, so that a slow step refills none.)
	c.HDel(context.Background(), key, "q")
	c.HSet(context.Background(), key, "tk", -0.5, "ts", storeNow(t, c))
	r := step(4, tb("a", 0, 0, 10), func(r reply) bool { return r.granted == 0 && r.waitUs > 90_000 && r.waitUs <= 105_000 })
	// An ask of more than the burst waits the time to half a bucket
	// (0.1 s, and the half token short), no longer (a late visit would
	// lose refill), though its ask refills in 0.3 s.
	c.HDel(context.Background(), key, "q")
	x := tb("a", 0, 0, 30)
	x.slack = 30
	step(41, x, func(r reply) bool { return r.granted <= 1 && r.waitUs > 90_000 && r.waitUs <= 110_000 }) // (10 + 0.5) / 100 s
	// Visits queue: with the slot of x's ask 0.1 s ahead, b's short ask
	// of 10 comes 0.1 s after it, and c's 0.1 s after b's.
	y := tb("b", 0, 0, 10)
	y.slack = 30 // (its cap 15 of 2 hosts, c's 10 of 3)
	rb := step(42, y, func(r reply) bool { return r.granted <= 1 && r.waitUs > 180_000 && r.waitUs <= 210_000 })
	y.host = "c"
	step(43, y, func(r reply) bool {
		return r.granted <= 1 && r.waitUs > rb.waitUs+90_000 && r.waitUs <= rb.waitUs+100_000
	})
	// (a alone again, its bucket empty, no visit queued)
	c.HDel(context.Background(), key, "q", "g:b", "g:c")
	c.Del(context.Background(), scriptKeys(key)[1])
	// Served short (3 of its ask of 10, half a token left): its slot is
	// after the refill of its ask (0.1 s), not of what it took (0.03 s):
	// a host served short would come back as short after the one before
	// each turn, and find as little again (TestRogueWriter's token cases:
	// one host held to a seventh of the grants for a second).
	c.HSet(context.Background(), key, "tk", 3.5, "ts", storeNow(t, c))
	step(44, tb("a", 0, 0, 10), func(r reply) bool { return r.granted == 3 && r.waitUs > 90_000 && r.waitUs <= 100_000 })
	c.HDel(context.Background(), key, "q")
	c.HSet(context.Background(), key, "tk", 0)
	// 60 ms at 100/s: 6 more (5, 6 or 7 with the scheduler's slack).
	time.Sleep(60 * time.Millisecond)
	step(5, tb("a", 0, 0, 10), func(r reply) bool { return r.granted >= 5 && r.granted <= 8 })
	// A charge of 30 credit: a debt of about 30 that grants nothing.
	step(6, tb("a", 0, 30, 10), func(r reply) bool { return r.granted == 0 && r.waitUs > 0 })
	tk, _ := c.HGet(context.Background(), key, "tk").Float64()
	if tk > -25 || tk < -35 {
		t.Fatalf("tokens after a charge of 30 = %.2f, want about -30", tk)
	}
	// The wait never runs past the time to a full bucket: (20 − tk) /
	// 100 s.
	r = step(7, tb("a", 0, 0, 10), func(r reply) bool { return r.granted == 0 })
	if full := int64((20 - tk) / 100 * 1e6); r.waitUs > full+10_000 {
		t.Errorf("wait %dµs past the time to a full bucket (%dµs)", r.waitUs, full)
	}
	// The bucket never holds more than its burst, however long it rests:
	// a TTL brings a forgotten key back full.
	if ttl := c.PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Errorf("key TTL %v", ttl)
	}
}

// TestScriptHosts: the slack is split over the hosts that asked within the
// horizon; a host that stops asking is forgotten after the horizon; shares
// follow the grants.
func TestScriptHosts(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	key := "t:{h}"
	a := tb("a", 0, 0, 10)
	a.size = 1000 // plenty of tokens: only the slack limits
	a.horizonUs = 300_000
	ask := func(host string, held, want int64) reply {
		t.Helper()
		x := a
		x.host, x.held, x.want = host, held, want
		return runScript(t, c, key, x)
	}
	if r := ask("a", 0, 10); r.granted != 10 || r.cap != 10 {
		t.Fatalf("alone: %s, want 10 granted, cap 10", fmtReply(r))
	}
	// b arrives: 2 hosts, cap 5 each; b gets its 5 at once, though a
	// still holds the 10 it got alone (it keeps them until its next ask).
	if r := ask("b", 0, 10); r.granted != 5 || r.hosts != 2 || r.cap != 5 {
		t.Fatalf("b: %s, want 5 granted, 2 hosts, cap 5", fmtReply(r))
	}
	// a spent 8 and asks again: its cap is 5 now, it holds 2: 3 more.
	if r := ask("a", 2, 10); r.granted != 3 || r.cap != 5 {
		t.Fatalf("a with 2: %s, want 3", fmtReply(r))
	}
	// a holding its cap gets nothing more.
	if r := ask("a", 5, 10); r.granted != 0 {
		t.Fatalf("a at its cap: %s, want 0", fmtReply(r))
	}
	// c: 3 hosts, cap 3.
	if r := ask("c", 0, 10); r.granted != 3 || r.hosts != 3 || r.cap != 3 {
		t.Fatalf("c: %s", fmtReply(r))
	}
	// Shares: a got 13, b 5, c 3 (decayed a little).
	r := ask("a", 3, 0)
	if r.own < 12 || r.own > 13 || r.total < 20 || r.total > 21 {
		t.Errorf("a's share %.2f of %.2f, want 13 of 21", r.own, r.total)
	}
	// After the horizon b and c are forgotten: a alone again.
	time.Sleep(350 * time.Millisecond)
	if r := ask("a", 0, 10); r.hosts != 1 || r.granted != 10 {
		t.Errorf("after the horizon: %s, want 1 host, 10 granted", fmtReply(r))
	}
	if n := len(c.HKeys(context.Background(), key).Val()); n != 6 { // tk ts q G tG g:a
		t.Errorf("%d fields left, want 6 (a's and the bucket's): %v", n, c.HKeys(context.Background(), key).Val())
	}
}

// TestScriptFixedWindow: at most the limit per window of the store's
// clock, a charge counted in the window, the time left in it, a wait to
// its end when empty, and a fresh count in the next window.
func TestScriptFixedWindow(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	key := "t:{fw}"
	const win = 200_000 // µs
	a := askArgs{fixedWindow: true, rate: 50, size: 10, windowUs: win, slack: 100, mincap: 1, host: "a",
		horizonUs: 2_500_000, decayUs: 5_000_000}
	// Start just after a window opens, so the steps stay in it.
	for {
		r := runScript(t, c, "t:{probe}", a)
		if r.leftUs > win-50_000 {
			break
		}
		time.Sleep(time.Duration(r.leftUs+2000) * time.Microsecond)
	}
	ask := func(charge, want int64) reply {
		x := a
		x.charge, x.want = charge, want
		return runScript(t, c, key, x)
	}
	r1 := ask(2, 5) // 2 of credit counted, 5 granted
	r2 := ask(0, 5) // 3 left
	r3 := ask(0, 5) // none
	if r1.granted != 5 || r2.granted != 3 || r3.granted != 0 {
		t.Fatalf("grants %d, %d, %d in one window of 10 with a charge of 2: want 5, 3, 0", r1.granted, r2.granted, r3.granted)
	}
	if r3.waitUs != r3.leftUs || r3.leftUs <= 0 || r3.leftUs > win {
		t.Errorf("empty window: wait %dµs, left %dµs", r3.waitUs, r3.leftUs)
	}
	if r2.leftUs > r1.leftUs || r1.leftUs > win {
		t.Errorf("time left does not shrink: %d then %d", r1.leftUs, r2.leftUs)
	}
	time.Sleep(time.Duration(r3.leftUs+1000) * time.Microsecond)
	if r := ask(0, 15); r.granted != 10 || r.leftUs < win-50_000 {
		t.Errorf("next window: %s, want the whole limit of 10 and most of the window left", fmtReply(r))
	}
}
