package shaper

import (
	"math"
	"strings"
	"testing"
)

// fleetStore is a fake shared store of one global total: a token bucket
// on the test's clock that grants the hosts' leases, as the Redis script
// does (a host asks for up to its cap minus what it holds, the store
// grants what its bucket has).
type fleetStore struct {
	lim   *Limiter
	state State
	asks  int
}

// refill tops host g's lease of TotalKey up to hostCap tokens at now, as
// a refresher would, from what the store's bucket holds.
func (s *fleetStore) refill(g *fakeGlobal, now, hostCap int64) {
	l := g.leases[TotalKey]
	if l == nil || l.Tokens() >= hostCap {
		return
	}
	s.asks++
	want, got := hostCap-l.Tokens(), int64(0)
	for got < want && s.lim.Allow(&s.state, now, 1) {
		got++
	}
	l.Grant(got, now+int64(4e9))
}

// globalTotalEngine is a host: one rule, each source its own flow limited
// locally to keyRate/keyBurst, charging the global total tc whose source is
// g (nil: the total runs locally).
func globalTotalEngine(t testing.TB, keyRate, keyBurst float64, tc TotalConfig, g *fakeGlobal) *Engine {
	t.Helper()
	tc.Global = true
	tot := Total{Name: "fleet", Limit: tc}
	if g != nil {
		tot.Global = g
	}
	return mustPolicy(t, Policy{
		Rules:  []Rule{{Name: "r", Limit: Config{Rate: keyRate, Burst: keyBurst}, Total: "fleet"}},
		Totals: []Total{tot},
	})
}

// TestGlobalTotalTwoHosts: two engines (two hosts) whose global total
// draws on one fake store: together they accept at most the fleet's
// burst + rate × T + the hosts' caps (+ one packet of credit each),
// though each could accept its keys' limits (more than the cap) on its
// own, while each host's per-key limits stay local: a key's packets on a
// host are limited there, whatever the same key does on the other.
// Without the shared source (each total local) the two accept about
// twice the cap.
func TestGlobalTotalTwoHosts(t *testing.T) {
	const (
		keys              = 5
		keyRate, keyBurst = 100.0, 10.0
		rate, burst       = 400.0, 40.0
		hostCap           = 30
		T                 = 4.0 // seconds
		step              = int64(1e6)
	)
	run := func(shared bool) (perHost [2]uint64, perKey [2][keys]int, asks int) {
		store := &fleetStore{lim: newLimiterOK(LimiterConfig{Algorithm: TokenBucket, Rate: rate, Burst: burst})}
		store.lim.Reset(&store.state, t0)
		var hosts [2]*Engine
		var srcs [2]*fakeGlobal
		for h := range hosts {
			if shared {
				srcs[h] = newFakeGlobal()
			}
			hosts[h] = globalTotalEngine(t, keyRate, keyBurst, TotalConfig{Rate: rate, Burst: burst}, srcs[h])
		}
		pkts := make([][]byte, keys)
		for k := range pkts {
			pkts[k] = udp(k, 1, 8)
		}
		// Each key offers 200 packets/s on each host, twice its limit:
		// 5 × 100/s may pass the keys of one host, above the total's
		// 400/s. The hosts ask the store in turns.
		for now := t0; now < t0+int64(T*1e9); now += step {
			for i := range hosts {
				h := (i + int((now-t0)/step)) % 2
				e := hosts[h]
				if shared {
					store.refill(srcs[h], now, hostCap)
				}
				if (now-t0)/step%5 != 0 {
					continue
				}
				for k, p := range pkts {
					if e.Decide(p, now) == Accept {
						perKey[h][k]++
					}
				}
			}
		}
		for h, e := range hosts {
			perHost[h] = e.TotalStats(0).Accepted
		}
		return perHost, perKey, store.asks
	}
	perHost, perKey, asks := run(true)
	fleet := perHost[0] + perHost[1]
	bound := burst + rate*T + 2*hostCap + 2
	t.Logf("shared: hosts accepted %v, %d in all, bound %.0f, %d asks", perHost, fleet, bound, asks)
	if float64(fleet) > bound {
		t.Errorf("the fleet accepted %d, above burst + rate × T + the hosts' caps = %.0f", fleet, bound)
	}
	if float64(fleet) < 0.9*rate*T {
		t.Errorf("the fleet accepted %d, under 0.9 × rate × T = %.0f: the leases starve it", fleet, 0.9*rate*T)
	}
	for h := range perKey {
		if perHost[h] < uint64(0.3*rate*T) {
			t.Errorf("host %d accepted %d: starved by the other", h, perHost[h])
		}
		for k, n := range perKey[h] {
			if float64(n) > keyRate*T+keyBurst {
				t.Errorf("host %d key %d accepted %d, above its local %.0f", h, k, n, keyRate*T+keyBurst)
			}
		}
	}
	local, _, _ := run(false)
	t.Logf("local totals: hosts accepted %v", local)
	if n := local[0] + local[1]; float64(n) < 1.8*rate*T {
		t.Errorf("two local totals accepted %d in all, want about twice the cap: the test does not tell them apart", n)
	}
}

// TestGlobalTotalKeysLocal: under a global total with room, a key's own
// limit is this host's: the key gets its burst here however much of the
// same key the other host let through, and a packet its key refuses hands
// the lease's token back.
func TestGlobalTotalKeysLocal(t *testing.T) {
	g := newFakeGlobal()
	e := globalTotalEngine(t, 1e-3, 3, TotalConfig{Rate: 1000, Burst: 100}, g)
	p := udp(1, 1, 8)
	if e.Decide(p, t0) != Accept { // the lease's credit
		t.Fatal("the first packet did not pass on credit")
	}
	l := g.leases[TotalKey]
	l.Grant(51, t0+1e9) // the credit charged, 50 granted
	for i := 0; i < 2; i++ {
		if e.Decide(p, t0) != Accept {
			t.Fatalf("packet %d of the key's burst of 3 refused", i+2)
		}
	}
	if got := l.Tokens(); got != 48 {
		t.Fatalf("lease tokens %d after two packets, want 48", got)
	}
	for i := 0; i < 5; i++ {
		if e.Decide(p, t0) != Drop {
			t.Fatal("a packet over its key's local limit passed")
		}
	}
	if got := l.Tokens(); got != 48 {
		t.Errorf("lease tokens %d after the key refused 5, want 48: a packet the key refuses must cost the total nothing", got)
	}
	if s := e.TotalStats(0); s.Accepted != 3 || s.Dropped != 0 || s.Packets != 8 {
		t.Errorf("total stats %+v, want 8 packets, 3 accepted, none refused by the total", s)
	}
	if e.Decide(udp(2, 1, 8), t0) != Accept {
		t.Error("another key refused with the lease's tokens left")
	}
}

// TestGlobalTotalFallback: while the store is gone (the source sets a
// fallback limiter) the total is limited on this host by that limiter,
// starting spent, as a global rule's flows are, and its lease sees the
// demand; with the store back the lease decides again. A source with no
// lease to give (full, or closed) limits the total by its overflow
// limiter, and refuses while it has none.
func TestGlobalTotalFallback(t *testing.T) {
	g := newFakeGlobal()
	e := globalTotalEngine(t, 1000, 100, TotalConfig{Rate: 100, Burst: 10}, g)
	if e.Decide(udp(1, 1, 8), t0) != Accept {
		t.Fatal("credit")
	}
	l := g.leases[TotalKey]
	l.TakeDemand()
	fb := newLimiterOK(LimiterConfig{Algorithm: TokenBucket, Rate: 50, Burst: 5})
	g.local.SetFallback(fb)
	if e.Decide(udp(1, 1, 8), t0) != Drop {
		t.Error("the fallback did not start spent")
	}
	if d := l.TakeDemand(); d != 1 {
		t.Errorf("demand %d in fallback, want 1", d)
	}
	if acc := acceptedOf(e, 100, t0+int64(1e9)); acc != 5 {
		t.Errorf("the fallback accepted %d after 1 s at 50/s, burst 5: want 5", acc)
	}
	g.local.SetFallback(nil)
	l.Grant(4, t0+int64(1e10)) // the credit charged, 3 granted
	if acc := acceptedOf(e, 10, t0+int64(2e9)); acc != 3 {
		t.Errorf("back on the lease: %d accepted, want its 3 tokens", acc)
	}
	l.Retire()
	g.full = true
	if e.Decide(udp(1, 1, 8), t0+int64(3e9)) != Drop {
		t.Error("no lease and no overflow limiter: accepted")
	}
	g.local.SetOverflow(newLimiterOK(LimiterConfig{Algorithm: TokenBucket, Rate: 10, Burst: 2}))
	if acc := acceptedOf(e, 10, t0+int64(3e9)); acc != 2 {
		t.Errorf("the overflow limiter accepted %d, want its burst of 2", acc)
	}
}

// TestGlobalTotalReplay: without a source a global total runs locally
// (replay: a capture holds one host's view); with one, a reload keeps its
// state (and lease) only with the same source.
func TestGlobalTotalReplay(t *testing.T) {
	e := globalTotalEngine(t, 1000, 100, TotalConfig{Rate: 1e-3, Burst: 3}, nil)
	if acc := acceptedOf(e, 10, t0); acc != 3 {
		t.Errorf("a global total without a source accepted %d, want its local burst of 3", acc)
	}
	g := newFakeGlobal()
	p := Policy{
		Rules:  []Rule{{Name: "r", Limit: Config{Rate: 1000, Burst: 100}, Total: "fleet"}},
		Totals: []Total{{Name: "fleet", Limit: TotalConfig{Rate: 10, Global: true}, Global: g}},
	}
	e = mustPolicy(t, p)
	e.Decide(udp(1, 1, 8), t0)
	ne, _, err := e.Reload(p)
	if err != nil {
		t.Fatal(err)
	}
	ne.Decide(udp(1, 1, 8), t0)
	if g.calls != 1 {
		t.Errorf("Lease called %d times across a reload that keeps the source, want 1", g.calls)
	}
	p.Totals[0].Global = newFakeGlobal()
	if ne, _, err = ne.Reload(p); err != nil {
		t.Fatal(err)
	}
	if ne.Decide(udp(1, 1, 8), t0) != Accept || ne.TotalStats(0).Packets != 1 {
		t.Errorf("a new source kept the old state: %+v", ne.TotalStats(0))
	}
}

// TestGlobalTotalRefused: a global total refuses what it cannot do, each
// with its reason.
func TestGlobalTotalRefused(t *testing.T) {
	for _, tc := range []struct {
		rule Config
		tot  TotalConfig
		want string
	}{
		{Config{Rate: 1, Shape: true}, TotalConfig{Rate: 10, Global: true}, "a shaping rule cannot charge a global total"},
		{Config{Rate: 1}, TotalConfig{Rate: 10, Algorithm: SlidingWindowCounter, Global: true}, "a global limit is a token-bucket or fixed-window one"},
	} {
		_, err := NewPolicy(Policy{
			Rules:  []Rule{{Name: "r", Limit: tc.rule, Total: "t"}},
			Totals: []Total{{Name: "t", Limit: tc.tot, Global: newFakeGlobal()}},
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line saying %q", tc.tot, err, tc.want)
		}
	}
}

// TestGlobalTotalNoAllocs: a decision under a global total, on its lease
// or its fallback, allocates nothing.
func TestGlobalTotalNoAllocs(t *testing.T) {
	g := newFakeGlobal()
	e := globalTotalEngine(t, 100, 5, TotalConfig{Rate: 1e4}, g)
	pkts := make([][]byte, 2000)
	for i := range pkts {
		pkts[i] = udp(i, 1, 8)
	}
	now := t0
	acceptedOf(e, len(pkts), now) // each flow seen once
	l := g.leases[TotalKey]
	for _, fallback := range []bool{false, true} {
		if fallback {
			g.local.SetFallback(newLimiterOK(LimiterConfig{Algorithm: TokenBucket, Rate: 1e4, Burst: 100}))
		}
		i := 0
		if n := testing.AllocsPerRun(20000, func() {
			now += 1000
			l.Grant(1, math.MaxInt64-1)
			e.Decide(pkts[i%len(pkts)], now)
			i++
		}); n != 0 {
			t.Errorf("fallback %v: %v allocs per Decide under a global total", fallback, n)
		}
	}
}

// acceptedOf decides a packet of each of the flows 0 to n-1 at now and
// returns how many were accepted.
func acceptedOf(e *Engine, n int, now int64) int {
	acc := 0
	for i := range n {
		if e.Decide(udp(i, 1, 8), now) == Accept {
			acc++
		}
	}
	return acc
}

// newLimiterOK is NewLimiter for a configuration the test knows is valid.
func newLimiterOK(c LimiterConfig) *Limiter {
	l, _ := NewLimiter(c)
	return l
}
