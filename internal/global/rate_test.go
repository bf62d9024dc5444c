package global

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// rl is a rate lease's ask: 100/s, epochs of iv, demand want per second.
func rl(host string, want float64, iv time.Duration, known bool) askArgs {
	return askArgs{rateLease: true, rate: 100, size: 20, windowUs: iv.Microseconds(), slack: 100, mincap: 1,
		host: host, want: int64(want * 1000), horizonUs: 2_500_000, decayUs: 5_000_000, known: known}
}

// TestScriptRateLease walks the rate leases of one key (rate.go): a host
// alone gets the whole rate; a second is shared in proportion to the
// demands but gets only what the leases still valid leave; the rates
// valid in an epoch never sum to more than the rate; a host's lease is
// forgotten two epochs after its last ask; forged sums and a flush grant
// nothing.
func TestScriptRateLease(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	ctx := context.Background()
	key := "t:{r}"
	const long = 1000 * time.Second // (no epoch ends during the steps)
	valid := func(i int) {
		t.Helper()
		rc, _ := c.HGet(ctx, key, "Rc").Float64()
		rp, _ := c.HGet(ctx, key, "Rp").Float64()
		if rc+rp > 100.001 {
			t.Fatalf("step %d: the leases valid sum to %.3f/s, over the rate (100/s)", i, rc+rp)
		}
	}
	step := func(i int, a askArgs, check func(r reply) bool) reply {
		t.Helper()
		r := runScript(t, c, key, a)
		if !check(r) {
			t.Fatalf("step %d: rate ask(%s, want %d) = %s", i, a.host, a.want, fmtReply(r))
		}
		if i < 7 || i == 20 || i == 21 || i >= 30 {
			// (a forged sum, or a flushed epoch, counts as the rate:
			// then they may sum to more)
			valid(i)
		}
		return r
	}
	// Alone, a new key: the whole rate (its demand scaled up), for the
	// rest of this epoch and the next.
	step(1, rl("a", 60, long, false), func(r reply) bool {
		return r.granted == 100_000 && r.hosts == 1 && r.leftUs > long.Microseconds() && r.leftUs <= 2*long.Microseconds()
	})
	// b: half the rate is its share (equal demands), but a holds it all.
	step(2, rl("b", 60, long, false), func(r reply) bool { return r.granted == 0 && r.cap == 50_000 && r.hosts == 2 })
	// a renews: its lease replaced by its share.
	step(3, rl("a", 60, long, true), func(r reply) bool { return r.granted == 50_000 && r.hosts == 2 })
	// b again: the half a left.
	step(4, rl("b", 60, long, true), func(r reply) bool { return r.granted == 50_000 })
	// Demand moves to b: a renews with less and gets its share, 12/72
	// of the rate.
	step(5, rl("a", 12, long, true), func(r reply) bool { return r.granted == 16_666 })
	// b renews: its share, 60/72, is what is left.
	step(6, rl("b", 60, long, true), func(r reply) bool { return r.granted == 83_333 })
	// Forged sums (a number too large, not a number) are the rate
	// spent; a forged epoch ahead is spent too.
	for i, f := range [][2]string{{"Rc", "1e9"}, {"Rp", "nan"}, {"Rc", "-5"}, {"e", "1e15"}} {
		c.HSet(ctx, key, f[0], f[1])
		step(7+i, rl("c", 60, long, true), func(r reply) bool { return r.granted == 0 })
		if f[0] == "e" {
			// (spent for this epoch: the leases before are gone)
			c.Del(ctx, key, scriptKeys(key)[1])
		} else {
			c.HSet(ctx, key, "Rc", "100", "Rp", "0", "e", strconv.FormatInt(storeNow(t, c)/long.Microseconds(), 10))
		}
	}
	// A flush: a host that knew the key gets nothing this epoch; a key
	// new to every host is granted.
	c.FlushAll(ctx)
	step(20, rl("a", 60, long, true), func(r reply) bool { return r.granted == 0 })
	c.FlushAll(ctx)
	step(21, rl("a", 60, long, false), func(r reply) bool { return r.granted == 100_000 })
	// A flush: the hosts that knew the key keep the leases they held
	// (counted from then on), the rest of the epoch spent for the others.
	c.FlushAll(ctx)
	ka, kb := rl("a", 60, long, true), rl("b", 60, long, true)
	ka.held, kb.held = 40_000, 30_000
	step(22, ka, func(r reply) bool { return r.granted == 40_000 })
	step(23, kb, func(r reply) bool { return r.granted == 30_000 })
	step(24, rl("c", 60, long, true), func(r reply) bool { return r.granted == 0 })
	// Epochs of 100 ms: a's lease and demand are forgotten two epochs
	// after its ask, and b gets the whole rate.
	c.FlushAll(ctx)
	short := 100 * time.Millisecond
	step(30, rl("a", 60, short, false), func(r reply) bool { return r.granted == 100_000 })
	step(31, rl("b", 60, short, false), func(r reply) bool { return r.granted < 100_000 })
	time.Sleep(2*short + 50*time.Millisecond)
	step(32, rl("b", 60, short, true), func(r reply) bool { return r.granted == 100_000 && r.hosts == 1 })
}

// TestScriptRateBurst walks the burst bucket of a rate-leased key
// (rate.go): a key new to every host holds a full burst (20), drawn by the
// asks up to each host's room (what its new rate lets it hold, less what
// it holds) and never more than the burst in all; while the leases valid
// hold the whole rate it does not refill; tokens a host dropped are given
// back, up to the burst; a forged count (too large, not a
// number, negative) is an empty bucket, and so is a flush (a key new to
// every host is full again); once the leases end it refills at the rate.
func TestScriptRateBurst(t *testing.T) {
	s := testutil.StartRedis(t)
	c := rawClient(t, s.Addr())
	ctx := context.Background()
	key := "t:{b}"
	const long = 1000 * time.Second // (no epoch ends during the steps)
	drawn := int64(0)
	step := func(i int, a askArgs, check func(r reply) bool) {
		t.Helper()
		r := runScript(t, c, key, a)
		drawn += r.burst
		if !check(r) {
			t.Fatalf("step %d: rate ask(%s, want %d, have %d) = %s", i, a.host, a.want, a.have, fmtReply(r))
		}
		if drawn > 20 {
			t.Fatalf("step %d: %d burst tokens drawn in all, over the burst (20)", i, drawn)
		}
	}
	have := func(a askArgs, n int64) askArgs { a.have = n; return a }
	// a, alone: the whole rate (it may hold 100), 95 held: room for 5.
	step(1, have(rl("a", 60, long, false), 95), func(r reply) bool { return r.granted == 100_000 && r.burst == 5 })
	// b: no rate (a holds it), room for one packet.
	step(2, rl("b", 60, long, false), func(r reply) bool { return r.granted == 0 && r.burst == 1 })
	// a renews with nothing held: half the rate, room for 50: the 14 left.
	step(3, rl("a", 60, long, true), func(r reply) bool { return r.granted == 50_000 && r.burst == 14 })
	// b takes the other half: the leases hold the whole rate, nothing
	// refills.
	step(4, rl("b", 60, long, true), func(r reply) bool { return r.granted == 50_000 && r.burst == 0 })
	// Tokens a host's bucket dropped are given back (and count again
	// against the burst): b gives 7 back and draws them; a gives 100
	// back, the bucket holds 20 at most, a has no room; b, holding 31 of
	// its 50, draws 19.
	drawn = 0
	back := func(a askArgs, n int64) askArgs { a.back = n; return a }
	step(41, back(rl("b", 60, long, true), 7), func(r reply) bool { return r.granted == 50_000 && r.burst == 7 })
	drawn = 0
	step(42, have(back(rl("a", 60, long, true), 100), 50), func(r reply) bool { return r.granted == 50_000 && r.burst == 0 })
	step(43, have(rl("b", 60, long, true), 31), func(r reply) bool { return r.granted == 50_000 && r.burst == 19 })
	// Forged counts: empty.
	for i, v := range []string{"20", "1e9", "nan", "-5", "inf"} {
		c.HSet(ctx, key, "b", v)
		if v == "20" {
			// (a full count, plausible: drawn, once)
			drawn = 0
			step(5, rl("b", 60, long, true), func(r reply) bool { return r.burst == 20 })
			continue
		}
		step(5+i, rl("c", 60, long, true), func(r reply) bool { return r.granted == 0 && r.burst == 0 })
	}
	// A flush: empty for the hosts that knew the key (their leases kept);
	// a key new to every host is full.
	c.FlushAll(ctx)
	drawn = 0
	ka := rl("a", 60, long, true)
	ka.held = 50_000
	step(10, ka, func(r reply) bool { return r.granted == 50_000 && r.burst == 0 })
	c.FlushAll(ctx)
	step(11, rl("a", 60, long, false), func(r reply) bool { return r.granted == 100_000 && r.burst == 20 })
	// Epochs of 100 ms: a holds the whole rate, b finds the bucket
	// empty; once a's lease ended (two epochs) the bucket refills at the
	// rate, 20 in 200 ms: b, after 450 ms, finds it full.
	c.FlushAll(ctx)
	drawn = 0
	short := 100 * time.Millisecond
	step(20, rl("a", 60, short, false), func(r reply) bool { return r.granted == 100_000 && r.burst == 20 })
	step(21, rl("b", 60, short, false), func(r reply) bool { return r.burst == 0 })
	time.Sleep(450 * time.Millisecond)
	drawn = 0
	step(22, rl("b", 60, short, true), func(r reply) bool { return r.granted == 100_000 && r.burst == 20 })
}

// BenchmarkRateShares measures the store's side of rate leases alone, on
// one redis-server: n hosts ask the script as the refreshers do (once an
// interval, up to 2 % early, after I ÷ 4 when granted less than 90 % of
// the share; I = 1 s), each with a demand of twice its fair part ±25 %
// (the range of a host's estimate at 4 packets/s with tau = 0.5 s), from
// random phases. Reported over the last 3 s of 5: held/rate, the rates of
// the leases valid summed over the rate (sampled every 10 ms), and
// req/bar, the asks per second over 1.2 × hosts ÷ interval.
//
//	go test -run '^$' -bench RateShares -benchtime 1x ./internal/global
func BenchmarkRateShares(b *testing.B) {
	s := testutil.StartRedis(b)
	c := rawClient(b, s.Addr())
	const rate, iv, warm, run = 2000.0, time.Second, 2 * time.Second, 5 * time.Second
	for _, n := range []int{100, 1000} {
		b.Run("hosts="+strconv.Itoa(n), func(b *testing.B) {
			c.FlushAll(context.Background())
			type host struct {
				next, until time.Time
				r           float64
			}
			hs := make([]host, n)
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			start := time.Now()
			for i := range hs {
				hs[i].next = start.Add(time.Duration(rng.Float64() * float64(iv)))
			}
			var held, samples float64
			asks, sampled := 0, start
			for now := start; now.Sub(start) < run; now = time.Now() {
				for i := range hs {
					h := &hs[i]
					if now.Before(h.next) {
						continue
					}
					a := rl("h"+strconv.Itoa(i), 2*rate/float64(n)*(0.75+0.5*rng.Float64()), iv, !h.until.IsZero())
					a.rate, a.size, a.slack = rate, 200, rate
					if h.until.After(now) {
						a.held = int64(h.r * 1000)
					}
					rep := runScript(b, c, "t:{shares}", a)
					if now.Sub(start) >= warm {
						asks++
					}
					h.r, h.until = float64(rep.granted)/1000, now.Add(time.Duration(rep.leftUs)*time.Microsecond)
					h.next = now.Add(iv - time.Duration(0.02*float64(iv)*rng.Float64()))
					if float64(rep.granted) < 0.9*float64(rep.cap) {
						h.next = now.Add(iv / 4)
					}
				}
				if now.Sub(sampled) >= 10*time.Millisecond && now.Sub(start) >= warm {
					sampled = now
					for i := range hs {
						if hs[i].until.After(now) {
							held += hs[i].r / rate
						}
					}
					samples++
				}
				time.Sleep(200 * time.Microsecond)
			}
			b.ReportMetric(held/samples, "held/rate")
			b.ReportMetric(float64(asks)/(run-warm).Seconds()/(1.2*float64(n)/iv.Seconds()), "req/bar")
		})
	}
}
