package shaper

import (
	"math"
	"slices"
	"testing"
	"time"
)

// fairRun is a run of the fluid model of fair shaping under a total: keys
// offering packets at constant rates through a shaping rule of per-key
// rate r and a total of rate R, each packet's departure as the engine
// fixes it.
type fairRun struct {
	r, R, burst, totBurst float64
	maxDelay              int64
	deps                  [][]int64 // each key's departures, in order
	delays                []int64   // every accepted packet's wait
	maxWait               []int64   // each key's longest wait
	dropped               []int     // each key's packets dropped
	fair                  float64   // the total's fair rate at the end
	// payloads, if set, makes the rule and total count bytes, key k's
	// i-th packet carrying payloads[i % len] bytes of UDP payload (28
	// more of IP and UDP headers); costs are each departure's.
	payloads []int
	costs    [][]int64
	// starts, if set, is when each key starts sending (0: at once).
	starts []time.Duration
}

// runFair offers key k offered[k] packets per second for dur, evenly
// spaced (each key at its own phase), through a shaping rule of rate r
// (burst 2, max delay 200 ms) and a shaping total of rate R and burst
// totBurst.
func runFair(t *testing.T, r, R, totBurst float64, offered []float64, dur time.Duration) *fairRun {
	t.Helper()
	return (&fairRun{r: r, R: R, burst: 2, totBurst: totBurst}).run(t, offered, dur)
}

// run is runFair with fr's settings (max delay 200 ms).
func (fr *fairRun) run(t *testing.T, offered []float64, dur time.Duration) *fairRun {
	t.Helper()
	const t0 = int64(1e18) // on an epoch boundary, as any start may be
	fr.maxDelay = int64(200 * time.Millisecond)
	fr.deps, fr.costs = make([][]int64, len(offered)), make([][]int64, len(offered))
	fr.dropped, fr.maxWait = make([]int, len(offered)), make([]int64, len(offered))
	bytes := fr.payloads != nil
	e := mustPolicy(t, Policy{
		Rules:  []Rule{{Name: "s", Limit: Config{Rate: fr.r, Bytes: bytes, Burst: fr.burst, Shape: true, MaxDelay: fr.maxDelay}, Total: "t"}},
		Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: fr.R, Bytes: bytes, Burst: fr.totBurst}}},
	})
	type arrival struct {
		at  int64
		key int
	}
	var as []arrival
	for k, o := range offered {
		gap, start := 1e9/o, int64(0)
		if fr.starts != nil {
			start = int64(fr.starts[k])
		}
		for i := 0; ; i++ {
			at := start + int64((float64(i)+float64(k+1)/float64(len(offered)+1))*gap)
			if at >= int64(dur) {
				break
			}
			as = append(as, arrival{t0 + at, k})
		}
	}
	slices.SortStableFunc(as, func(a, b arrival) int { return int(a.at - b.at) })
	sizes := fr.payloads
	if sizes == nil {
		sizes = []int{8}
	}
	var pkts [][][]byte // key, size
	for k := range offered {
		var ps [][]byte
		for _, n := range sizes {
			ps = append(ps, udp(k+1, 1, n))
		}
		pkts = append(pkts, ps)
	}
	sent := make([]int, len(offered))
	var d Decision
	for _, a := range as {
		p := pkts[a.key][sent[a.key]%len(sizes)]
		sent[a.key]++
		cost := int64(1)
		if bytes {
			cost = int64(len(p))
		}
		e.DecidePacket(p, nil, a.at, &d)
		wait := int64(0)
		switch {
		case d.Verdict == Drop:
			fr.dropped[a.key]++
			continue
		case d.Depart != 0:
			wait = d.Depart - a.at
		}
		fr.deps[a.key] = append(fr.deps[a.key], a.at+wait-t0)
		fr.costs[a.key] = append(fr.costs[a.key], cost)
		fr.delays = append(fr.delays, wait)
		fr.maxWait[a.key] = max(fr.maxWait[a.key], wait)
	}
	fr.fair = e.FairRate(0)
	return fr
}

// in counts key k's departures in [from, to): packets, or bytes when the
// run counts bytes.
func (fr *fairRun) in(k int, from, to time.Duration) int {
	n := 0
	for i, d := range fr.deps[k] {
		if d >= int64(from) && d < int64(to) {
			n += int(fr.costs[k][i])
		}
	}
	return n
}

// checkCaps checks what holds whatever the shares: no key above its own
// limit (its departures a token bucket of rate r, burst 2 would pass), all
// departures within the total's bucket (rate R, burst totBurst; what
// fair.go guarantees is that from any instant none is held, and R × (T +
// max delay) + burst over any interval T, checked too), and no packet held
// beyond the max delay.
func (fr *fairRun) checkCaps(t *testing.T) {
	t.Helper()
	var all []fairDep
	for k, deps := range fr.deps {
		var mine []fairDep
		for i, d := range deps {
			mine = append(mine, fairDep{d, fr.costs[k][i]})
		}
		if !conforms(mine, fr.r, fr.burst) {
			t.Errorf("key %d departs faster than its own limit of %v/s, burst %v", k, fr.r, fr.burst)
		}
		all = append(all, mine...)
	}
	slices.SortStableFunc(all, func(a, b fairDep) int { return int(a.at - b.at) })
	if !conforms(all, fr.R, fr.totBurst) {
		t.Errorf("the departures pass the total's bucket (%v/s, burst %v) from the start: over it", fr.R, fr.totBurst)
	}
	slack := fr.totBurst + fr.R*float64(fr.maxDelay)/1e9
	j, sum := 0, int64(0)
	for i := range all {
		sum += all[i].cost
		for all[i].at-all[j].at > int64(time.Second) {
			sum -= all[j].cost
			j++
		}
		if n := float64(sum); n > fr.R*float64(all[i].at-all[j].at)/1e9+slack+1e-9 {
			t.Fatalf("%v departing within %v: over R × (T + max delay) + burst", n, time.Duration(all[i].at-all[j].at))
		}
	}
	if m := slices.Max(fr.delays); m > fr.maxDelay {
		t.Errorf("a packet waited %v, over the max delay of %v", time.Duration(m), time.Duration(fr.maxDelay))
	}
}

// fairDep is a departure: its time and cost.
type fairDep struct{ at, cost int64 }

// conforms reports whether deps (sorted by time) pass a token bucket of
// rate per second and capacity burst, full at 0.
func conforms(deps []fairDep, rate, burst float64) bool {
	tokens, last := burst, int64(0)
	for _, d := range deps {
		tokens = min(burst, tokens+rate*float64(d.at-last)/1e9)
		last = d.at
		if tokens < float64(d.cost)-1e-9 {
			return false
		}
		tokens -= float64(d.cost)
	}
	return true
}

// TestFairShapingFluid is the fluid model of the fair share: keys of own
// limit r = 100/s under a total of R, the shares measured over the last 8
// of 10 s (after the level has settled, which takes an epoch or two). A
// key held by its fair tag departs exactly one packet per 1/fair, so its
// count over the 8 s is fair × 8 s within ±2 (one packet at each end of the
// window); the level itself is set from whole epochs and so exact here.
func TestFairShapingFluid(t *testing.T) {
	const r = 100.0
	from, to := 2*time.Second, 10*time.Second
	win := (to - from).Seconds()
	near := func(t *testing.T, what string, got int, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 2 {
			t.Errorf("%s: %d departures, want %.0f ± 2", what, got, want)
		}
	}
	t.Run("alone", func(t *testing.T) {
		// One greedy key under a total of 4 keys' limits: its own limit.
		fr := runFair(t, r, 4*r, 4, []float64{3 * r}, to)
		fr.checkCaps(t)
		near(t, "the lone key", fr.in(0, from, to), r*win)
	})
	t.Run("two", func(t *testing.T) {
		// Two greedy keys under 4 limits: each its own limit.
		fr := runFair(t, r, 4*r, 4, []float64{3 * r, 2 * r}, to)
		fr.checkCaps(t)
		for k := range 2 {
			near(t, "each of two keys", fr.in(k, from, to), r*win)
		}
	})
	t.Run("eight", func(t *testing.T) {
		// Eight greedy keys under 4 limits: half their own limit each.
		offered := []float64{2 * r, 3 * r, 2 * r, 5 * r, 2 * r, 4 * r, 2 * r, 3 * r}
		fr := runFair(t, r, 4*r, 4, offered, to)
		fr.checkCaps(t)
		if fr.fair != r/2 {
			t.Errorf("fair rate %v, want %v", fr.fair, r/2)
		}
		for k := range offered {
			near(t, "each of eight keys", fr.in(k, from, to), r/2*win)
		}
	})
	t.Run("mixed", func(t *testing.T) {
		// Four keys below the fair share keep their demand (20/s, none
		// dropped); four greedy ones share the rest: (400 − 80) / 4 =
		// 80/s each, under their own limit. The total's bucket is
		// charged at arrival, so a light key waits behind what the
		// greedy keys hold beyond the total's burst (here up to 200 ms
		// × 320/s − 4): with a burst of the total's rate × max delay
		// (80) it waits for nothing.
		offered := []float64{20, 3 * r, 20, 2 * r, 20, 5 * r, 20, 2 * r}
		for _, tb := range []float64{4, 80} {
			fr := runFair(t, r, 4*r, tb, offered, to)
			fr.checkCaps(t)
			for k, o := range offered {
				if o == 20 {
					near(t, "a light key", fr.in(k, from, to), 20*win)
					if fr.dropped[k] != 0 {
						t.Errorf("light key %d: %d packets dropped", k, fr.dropped[k])
					}
					if tb == 80 && fr.maxWait[k] != 0 {
						t.Errorf("light key %d waited %v under a total of burst 80", k, time.Duration(fr.maxWait[k]))
					}
					continue
				}
				near(t, "a greedy key beside light ones", fr.in(k, from, to), 80*win)
			}
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// Bytes, packets of 100, 600 and 1 500 in turn (the quantum is
		// a packet: its cost at the fair rate): eight greedy keys of
		// 100 000 B/s under 400 000 B/s get 50 000 B/s each, within a
		// packet at each end of the window (±3 000 B).
		fr := (&fairRun{r: 1e5, R: 4e5, burst: 3000, totBurst: 6000, payloads: []int{72, 572, 1472}}).run(t,
			[]float64{300, 400, 300, 500, 300, 400, 300, 600}, to)
		fr.checkCaps(t)
		for k := range 8 {
			if got := fr.in(k, from, to); math.Abs(float64(got)-5e4*win) > 3000 {
				t.Errorf("key %d: %d bytes over %v s, want %.0f ± 3000", k, got, win, 5e4*win)
			}
		}
	})
	t.Run("newcomer", func(t *testing.T) {
		// Seven greedy keys, then an eighth from 5 s: from 5.5 s on (an
		// epoch, and the 200 ms the others hold already) each of the
		// eight gets 50/s, as if it had been there all along.
		starts := make([]time.Duration, 8)
		starts[7] = 5 * time.Second
		fr := (&fairRun{r: r, R: 4 * r, burst: 2, totBurst: 4, starts: starts}).run(t, []float64{300, 200, 300, 200, 300, 200, 300, 200}, to)
		fr.checkCaps(t)
		for k := range 8 {
			near(t, "each of eight keys after the newcomer", fr.in(k, 5500*time.Millisecond, to), r/2*4.5)
		}
	})
	t.Run("own-limit-binds", func(t *testing.T) {
		// Keys of demand 150/s and 60/s under a total of 400/s: max-min
		// gives 100 (their own limit) to the three greedy ones and 60 to
		// the light one; 360 < 400, no fair tag holds anyone.
		offered := []float64{1.5 * r, 1.5 * r, 60, 1.5 * r}
		fr := runFair(t, r, 4*r, 4, offered, to)
		fr.checkCaps(t)
		for k, o := range offered {
			near(t, "a key under its own limit", fr.in(k, from, to), min(o, r)*win)
		}
	})
}

// TestFairNoAllocs: a shaping decision with a total allocates nothing,
// held, overflowing or accepted now.
func TestFairNoAllocs(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules:  []Rule{{Name: "s", Limit: Config{Rate: 1000, Burst: 2, Shape: true, MaxDelay: int64(10 * time.Millisecond)}, Total: "t"}},
		Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 4000, Burst: 4}}},
	})
	pkts := make([][]byte, 16)
	for i := range pkts {
		pkts[i] = udp(i, 1, 8)
	}
	now, i := t0, 0
	var d Decision
	if n := testing.AllocsPerRun(20000, func() {
		now += 20_000 // 50 000/s offered, 4 000/s through
		e.DecidePacket(pkts[i%len(pkts)], nil, now, &d)
		i++
	}); n != 0 {
		t.Errorf("%v allocs per shaping decision with a total", n)
	}
	if s := e.Stats(); s.Delayed == 0 || s.ShapeOverflow == 0 {
		t.Errorf("the run held %d and overflowed %d: want both", s.Delayed, s.ShapeOverflow)
	}
}

// TestFairReloadKeepsLevel: a reload that keeps the total keeps its fair
// level and queue (the total's state), as a policing total's.
func TestFairReloadKeepsLevel(t *testing.T) {
	p := Policy{
		Rules:  []Rule{{Name: "s", Limit: Config{Rate: 100, Burst: 2, Shape: true, MaxDelay: int64(200 * time.Millisecond)}, Total: "t"}},
		Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 400, Burst: 4}}},
	}
	e := mustPolicy(t, p)
	now := t0
	for range 4000 { // 8 keys, 200/s each, for 2.5 s
		now += int64(time.Second / 1600)
		e.Decide(udp(int(now/int64(time.Second/1600))%8, 1, 8), now)
	}
	if e.FairRate(0) != 50 {
		t.Fatalf("fair rate %v before the reload, want 50", e.FairRate(0))
	}
	p.Rules[0].Mark = 1 // a change that keeps the rule's flows too
	ne, _, err := e.Reload(p)
	if err != nil {
		t.Fatal(err)
	}
	if ne.FairRate(0) != 50 || ne.TotalStats(0) != e.TotalStats(0) {
		t.Errorf("the reloaded total: fair rate %v, %+v; want 50, %+v", ne.FairRate(0), ne.TotalStats(0), e.TotalStats(0))
	}
}
