package shaper

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// shapeStep is one packet for Depart: at t0+t, of cost, which the caller
// can hold or not; want is the departure (offset from t0), or drop.
type shapeStep struct {
	t      int64
	cost   int64
	noHold bool
	want   int64 // departure, t0-relative
	drop   bool
}

func runShapeSteps(t *testing.T, c LimiterConfig, steps []shapeStep) {
	t.Helper()
	l, s := stepLimiter(t, c, steps[0].t)
	for i, st := range steps {
		cost := stepCost(st.cost)
		dep, ok := l.Depart(s, t0+st.t, cost, !st.noHold)
		switch {
		case st.drop && ok:
			t.Errorf("step %d: Depart(t0%+.6fs, %d, hold=%v) = t0%+.6fs, want a drop", i, float64(st.t)/1e9, cost, !st.noHold, float64(dep-t0)/1e9)
		case !st.drop && !ok:
			t.Errorf("step %d: Depart(t0%+.6fs, %d, hold=%v) = drop, want t0%+.6fs", i, float64(st.t)/1e9, cost, !st.noHold, float64(st.want)/1e9)
		case !st.drop && dep != t0+st.want:
			t.Errorf("step %d: Depart(t0%+.6fs, %d, hold=%v) = t0%+dns, want t0%+dns", i, float64(st.t)/1e9, cost, !st.noHold, dep-t0, st.want)
		}
	}
}

const us = int64(time.Microsecond)

// TestShapePPSSteps: 100 packets/s, burst 2, max delay 50 ms: a queue of
// 2 + 100 × 0.05 = 7 packets; departures 10 ms apart.
func TestShapePPSSteps(t *testing.T) {
	runShapeSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 100, Burst: 2, MaxDelay: 50 * ms}, []shapeStep{
		{t: 0, want: 0}, {t: 0, want: 0}, // the burst leaves at once
		{t: 0, want: 10 * ms}, {t: 0, want: 20 * ms}, {t: 0, want: 30 * ms}, {t: 0, want: 40 * ms},
		{t: 0, want: 50 * ms},                   // exactly max-delay away: held
		{t: 0, drop: true},                      // 60 ms away: the queue is full
		{t: 0, drop: true},                      // a drop charged nothing
		{t: 5 * ms, drop: true},                 // next slot at 60 ms, 55 ms away
		{t: 10 * ms, want: 60 * ms},             // 50 ms away again: held
		{t: 10 * ms, noHold: true, drop: true},  // would be held, but the caller cannot: dropped, uncharged
		{t: 11 * ms, drop: true},                // the slot at 70 ms is 59 ms away
		{t: 0, drop: true},                      // time going back is taken as 11 ms
		{t: 20 * ms, want: 70 * ms},             // 50 ms away
		{t: 500 * ms, want: 500 * ms},           // the queue drained and the burst refilled
		{t: 500 * ms, want: 500 * ms},           //
		{t: 500 * ms, noHold: true, drop: true}, // no tokens and no room to hold
		{t: 500 * ms, want: 510 * ms},           // 10 ms after the burst
		{t: 505 * ms, want: 520 * ms},           // paced behind the one before, not 10 ms after its arrival
		{t: 600 * ms, want: 600 * ms},           // conforms again: 1 token left
		{t: 605 * ms, want: 605 * ms},           // 1.5 tokens: at once
		{t: 605 * ms, want: 610 * ms},           // half a token: 5 ms
		{t: 670 * ms, want: 670 * ms},           // refilled
	})
}

// TestShapeBytesSteps: 20 Mbit/s = 2 500 000 bytes/s, burst 3000 bytes,
// max delay 1 ms: a 1500-byte packet takes 600 µs, a 100-byte one 40 µs.
func TestShapeBytesSteps(t *testing.T) {
	runShapeSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 2_500_000, Burst: 3000, MaxDelay: 1 * ms}, []shapeStep{
		{t: 0, cost: 1500, want: 0}, {t: 0, cost: 1500, want: 0},
		{t: 0, cost: 1500, want: 600 * us},
		{t: 0, cost: 100, want: 640 * us},         // small packets queue behind big ones: the flow's order
		{t: 0, cost: 1500, drop: true},            // 1240 µs away
		{t: 0, cost: 900, want: 1000 * us},        // exactly 1 ms away
		{t: 0, cost: 1, drop: true},               // 1000.4 µs
		{t: 1 * us, cost: 1, want: 1000*us + 400}, // 999.4 µs from arrival: held, at 1000.4 µs, behind the queue
		{t: 1001 * us, cost: 1500, want: 1600*us + 400},
		{t: 2 * sec, cost: 3000, want: 2 * sec},  // a burst's worth at once
		{t: 2 * sec, cost: 1, want: 2*sec + 400}, // one byte: 0.4 µs, rounded up to the nanosecond
		{t: 2 * sec, cost: 1, want: 2*sec + 800},
		{t: 2 * sec, cost: 1, want: 2*sec + 1200},
	})
}

// TestShapeFractionalRate: 0.5 packets/s, burst 1, max delay 5 s.
func TestShapeFractionalRate(t *testing.T) {
	runShapeSteps(t, LimiterConfig{Algorithm: TokenBucket, Rate: 0.5, Burst: 1, MaxDelay: 5 * sec}, []shapeStep{
		{t: 0, want: 0}, {t: 0, want: 2 * sec}, {t: 1 * sec, want: 4 * sec},
		{t: 1 * sec, want: 6 * sec}, // 5 s away: held
		{t: 1500 * ms, drop: true},  // 8 s: 6.5 s away
		{t: 20 * sec, want: 20 * sec},
	})
}

// TestShapeProperties: for random arrivals and costs, what Depart lets
// through is exactly a token bucket's output: each departure at or after
// its arrival and at most MaxDelay later; departures in arrival order; and
// over any
// interval of departures [a, b], at most burst + rate × (b − a) in all.
// Packets are dropped only when the queue is full: a dropped packet would
// have waited more than MaxDelay.
func TestShapeProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for iter := 0; iter < 300; iter++ {
		bytes := r.IntN(2) == 0
		c := LimiterConfig{Algorithm: TokenBucket, Rate: 1 + r.Float64()*200, Burst: float64(1 + r.IntN(8)), MaxDelay: int64(1+r.IntN(500)) * ms}
		maxCost := int64(1)
		if bytes {
			c.Rate *= 1000
			c.Burst = float64(1500 + r.IntN(10000))
			maxCost = 1500
		}
		l, err := NewLimiter(c)
		if err != nil {
			t.Fatal(err)
		}
		ts, costs := arrivals(r, 400, maxCost)
		var s State
		l.Reset(&s, ts[0])
		var deps, dcost []int64
		for i, now := range ts {
			dep, ok := l.Depart(&s, now, costs[i], true)
			if !ok {
				// It would have waited longer than MaxDelay: the bucket's
				// level minus the cost is below −rate × MaxDelay.
				if need := float64(costs[i]*nano-s.tokens) / l.rate; need <= float64(c.MaxDelay) {
					t.Fatalf("iter %d packet %d: dropped with a wait of %.0f ns, within max delay %d", iter, i, need, c.MaxDelay)
				}
				continue
			}
			if dep < now || dep-now > c.MaxDelay {
				t.Fatalf("iter %d packet %d: arrives %d, departs %d: %d ns later, max %d", iter, i, now, dep, dep-now, c.MaxDelay)
			}
			if n := len(deps); n > 0 {
				if dep < deps[n-1] {
					t.Fatalf("iter %d packet %d: departs before the packet before it", iter, i)
				}
			}
			deps = append(deps, dep)
			dcost = append(dcost, costs[i])
		}
		for a := range deps {
			var sum int64
			for b := a; b < len(deps); b++ {
				sum += dcost[b]
				if bound := c.Burst + c.Rate*float64(deps[b]-deps[a])/1e9; float64(sum) > bound+1e-6 {
					t.Fatalf("iter %d: %d departed in [%d, %d], over burst + rate × T = %.3f", iter, sum, deps[a], deps[b], bound)
				}
			}
		}
	}
}

func TestShapeLimiterErrors(t *testing.T) {
	for _, c := range []LimiterConfig{
		{Algorithm: FixedWindow, Rate: 10, Window: sec, MaxDelay: ms},
		{Algorithm: TokenBucket, Rate: 10, Burst: 1, MaxDelay: -1},
		{Algorithm: TokenBucket, Rate: 10, Burst: 1, MaxDelay: MaxMaxDelay + 1},
		{Algorithm: TokenBucket, Rate: 1e15, Burst: 1e9, MaxDelay: sec},
	} {
		if _, err := NewLimiter(c); err == nil {
			t.Errorf("NewLimiter(%+v): no error", c)
		}
	}
}

func TestDepartNoAllocs(t *testing.T) {
	l, _ := NewLimiter(LimiterConfig{Algorithm: TokenBucket, Rate: 100, Burst: 1, MaxDelay: sec})
	var s State
	now := t0
	l.Reset(&s, now)
	if a := testing.AllocsPerRun(1000, func() { now += ms; l.Depart(&s, now, 1, true) }); a != 0 {
		t.Errorf("Depart: %v allocations, want 0", a)
	}
}

func TestDelayHistogram(t *testing.T) {
	h := newDelayHist()
	delayBucket, delayUpper := delayLayout.Bucket, delayLayout.Upper
	for _, v := range []int64{0, 1, 127, 128, 129, 1000, 10 * ms, 50 * ms, 10 * sec, 60 * sec} {
		b := delayBucket(v)
		if up := delayUpper(b); up < v || (b > 0 && delayUpper(b-1) >= v) {
			t.Errorf("delay %d: bucket %d holds up to %d (the one before up to %d)", v, b, up, delayUpper(b-1))
		}
		if v >= 128 && float64(delayUpper(b)-v) > float64(v)/64 {
			t.Errorf("delay %d: bucket bound %d, more than 1/64 above", v, delayUpper(b))
		}
	}
	for i := int64(1); i <= 1000; i++ {
		h.Add(i * ms)
	}
	s := h.Stats()
	within := func(name string, got, want int64) {
		if math.Abs(float64(got-want)) > float64(want)/64+1 {
			t.Errorf("%s = %d, want %d within 1/64", name, got, want)
		}
	}
	if s.Count != 1000 || s.Max != 1000*ms || s.Sum != 500500*ms {
		t.Errorf("stats %+v", s)
	}
	within("p50", s.P50, 500*ms)
	within("p99", s.P99, 990*ms)
}

// TestEngineShape: a shaping rule through the engine: Depart set for held
// packets, per flow; overflow dropped and counted; SetHoldRoom bounds what
// is held, uncharged; the counters and delays.
func TestEngineShape(t *testing.T) {
	e := mustNew(t, Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: 30 * ms})
	a, b := udp(1, 1000, 10), udp(2, 1000, 10)
	type want struct {
		p      []byte
		now    int64
		depart int64 // t0-relative, -1: now (Depart 0)
		drop   bool
	}
	var d Decision
	for i, w := range []want{
		{a, 0, -1, false},
		{a, 0, 10 * ms, false},
		{b, 0, -1, false}, // another flow: its own bucket
		{a, 0, 20 * ms, false},
		{a, 0, 30 * ms, false},
		{a, 0, 0, true}, // 40 ms away: overflow
		{b, 0, 10 * ms, false},
		{a, 15 * ms, 40 * ms, false},
	} {
		e.DecidePacket(w.p, nil, t0+w.now, &d)
		switch {
		case w.drop && d.Verdict != Drop:
			t.Errorf("packet %d: %+v, want a drop", i, d)
		case !w.drop && (d.Verdict != Accept || (w.depart < 0 && d.Depart != 0) || (w.depart >= 0 && d.Depart != t0+w.depart)):
			t.Errorf("packet %d: %v, depart t0%+d, want ACCEPT, depart %d", i, d.Verdict, d.Depart-t0, w.depart)
		}
	}
	// No room to hold: dropped, and not charged: with room again the
	// next slot is still the one after 40 ms.
	e.SetHoldRoom(0)
	if e.DecidePacket(a, nil, t0+20*ms, &d); d.Verdict != Drop {
		t.Errorf("without hold room: %+v, want a drop", d)
	}
	e.SetHoldRoom(1)
	if e.DecidePacket(a, nil, t0+20*ms, &d); d.Verdict != Accept || d.Depart != t0+50*ms {
		t.Errorf("with hold room: %+v, want ACCEPT at t0+50ms", d)
	}
	if e.DecidePacket(b, nil, t0+5*ms, &d); d.Verdict != Drop { // would wait 15 ms, but the room is used up
		t.Errorf("hold room used: %+v, want a drop", d)
	}
	s := e.Stats()
	if s.Packets != 11 || s.Accepted != 8 || s.Delayed != 6 || s.ShapeOverflow != 3 || s.Dropped != 3 {
		t.Errorf("Stats = %+v", s)
	}
	if rs := e.RuleStats(0); rs.Delayed != 6 || rs.ShapeOverflow != 3 {
		t.Errorf("RuleStats = %+v", rs)
	}
	ds := e.Delays()
	if ds.Count != 6 || ds.Max != 30*ms || ds.Sum != (10+20+30+10+25+30)*ms {
		t.Errorf("Delays = %+v", ds)
	}
	// A policing rule never sets Depart.
	p := mustNew(t, Config{Rate: 100, Burst: 1})
	for i := 0; i < 3; i++ {
		if p.DecidePacket(a, nil, t0, &d); d.Depart != 0 {
			t.Errorf("policing rule: Depart %d", d.Depart)
		}
	}
}

func TestEngineShapeConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Rate: 10, Algorithm: FixedWindow, Shape: true},
		{Rate: 10, MaxDelay: ms},                                     // max delay without shaping
		{Rate: 10, Shape: true, MaxDelay: 2 * sec, FlowTimeout: sec}, // forgotten while held
		{Rate: 10, Shape: true, MaxDelay: MaxMaxDelay + 1},           // too long
		{Rate: 1e12, Bytes: true, Shape: true, MaxDelay: 5 * sec},    // a queue of 5e12 bytes
	} {
		if err := c.Check(); err == nil {
			t.Errorf("Check(%+v): no error", c)
		}
	}
	if err := (&Config{Rate: 10, Shape: true}).Check(); err != nil {
		t.Errorf("default max delay: %v", err)
	}
}

// TestShapeReload: a shaping rule that a reload keeps keeps its queue (the
// flows' debt), so the next packet departs behind those held before.
func TestShapeReload(t *testing.T) {
	pol := func(maxDelay int64) Policy {
		return Policy{Rules: []Rule{{Name: "s", Limit: Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: maxDelay}}}}
	}
	e := mustPolicy(t, pol(100*ms))
	a := udp(1, 1000, 10)
	var d Decision
	for i := 0; i < 4; i++ {
		e.DecidePacket(a, nil, t0, &d)
	}
	if d.Depart != t0+30*ms {
		t.Fatalf("before the reload: %+v", d)
	}
	e2, kept, err := e.Reload(pol(100 * ms))
	if err != nil || len(kept) != 1 {
		t.Fatalf("reload: kept %v, %v", kept, err)
	}
	if e2.DecidePacket(a, nil, t0, &d); d.Depart != t0+40*ms {
		t.Errorf("after a reload that keeps the rule: %+v, want departure at t0+40ms", d)
	}
	if e2.Delays().Count != 4 {
		t.Errorf("delays did not go on: %+v", e2.Delays())
	}
	e3, kept, _ := e2.Reload(pol(200 * ms))
	if len(kept) != 0 {
		t.Errorf("a changed max delay kept the rule's state")
	}
	if e3.DecidePacket(a, nil, t0, &d); d.Depart != 0 {
		t.Errorf("a changed rule starts with a full bucket: %+v", d)
	}
}

// TestShapeNoAllocs: zero allocations per packet in the shaping path, held,
// overflowing and with new flows churning a full table.
func TestShapeNoAllocs(t *testing.T) {
	pkts := make([][]byte, 5000)
	for i := range pkts {
		pkts[i] = udp(i%1500, 1, 8)
	}
	e := mustNew(t, Config{Rate: 100, Burst: 1, Shape: true, MaxDelay: 50 * ms, MaxFlows: 1000})
	now := t0
	var d Decision
	for _, p := range pkts {
		e.DecidePacket(p, nil, now, &d)
	}
	i := 0
	if n := testing.AllocsPerRun(20000, func() {
		now += 1000
		e.DecidePacket(pkts[i%len(pkts)], nil, now, &d)
		i++
	}); n != 0 {
		t.Errorf("%v allocs per shaped packet", n)
	}
	if e.Stats().Delayed == 0 || e.Stats().ShapeOverflow == 0 {
		t.Errorf("the test did not hold or overflow: %+v", e.Stats())
	}
}
