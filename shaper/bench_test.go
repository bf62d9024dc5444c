package shaper

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// BenchmarkDecide measures Engine.Decide over 1, 10 000 and 1 000 000 flows
// (packets cycle through the flows in order, the cache-unfriendly case), and
// beside it the baseline: one golang.org/x/time/rate.Limiter per flow in a Go
// map keyed by a 5-tuple struct, after the same decode.
//
//	go test -run ^$ -bench Decide -benchmem ./shaper
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 10_000, 1_000_000} {
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = udp(i, uint16(i), 36)
		}
		b.Run(fmt.Sprintf("engine/flows=%d", n), func(b *testing.B) {
			loopDecide(b, mustNew(b, Config{Rate: 1e6, Burst: 100, MaxFlows: n}), pkts)
		})
		b.Run(fmt.Sprintf("xrate-map/flows=%d", n), func(b *testing.B) {
			type tuple struct {
				src, dst     [4]byte
				sport, dport uint16
				proto        uint8
			}
			m := make(map[tuple]*rate.Limiter)
			decide := func(p []byte, now time.Time) bool {
				var q = struct{ p []byte }{p}
				k := tuple{[4]byte(q.p[12:16]), [4]byte(q.p[16:20]), uint16(q.p[20])<<8 | uint16(q.p[21]), uint16(q.p[22])<<8 | uint16(q.p[23]), q.p[9]}
				l := m[k]
				if l == nil {
					l = rate.NewLimiter(1e6, 100)
					m[k] = l
				}
				return l.AllowN(now, 1)
			}
			now := time.Unix(0, t0)
			for _, p := range pkts {
				decide(p, now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				now = now.Add(100)
				decide(pkts[i], now)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// BenchmarkDecideShape is BenchmarkDecide's engine with a shaping rule:
// packets arrive ten times faster than each flow's rate, and the max delay
// is 5 packets' worth at the rate, so after the burst a flow's packets are
// held (Depart) until its queue is full, then overflow, in turn. The
// caller holds everything it is asked to (no SetHoldRoom).
func BenchmarkDecideShape(b *testing.B) {
	for _, n := range []int{1, 10_000, 1_000_000} {
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = udp(i, uint16(i), 36)
		}
		for _, total := range []bool{false, true} {
			name := fmt.Sprintf("flows=%d", n)
			if total {
				name += ",total"
			}
			b.Run(name, func(b *testing.B) { benchShape(b, pkts, total) })
		}
	}
}

// benchShape is BenchmarkDecideShape over pkts, with or without a total
// (of half the flows' rates together: the fair share holds them).
func benchShape(b *testing.B, pkts [][]byte, total bool) {
	n := len(pkts)
	// Each flow sees a packet every 100 ns × n; its rate is a
	// tenth of that.
	rate := 1e9 / (100 * float64(n)) / 10
	c := Config{Rate: rate, Burst: 1, MaxFlows: n, Shape: true, MaxDelay: int64(5e9 / rate)}
	p := Policy{Rules: []Rule{{Name: "r", Limit: c}}}
	if total {
		p.Rules[0].Total = "t"
		p.Totals = []Total{{Name: "t", Limit: TotalConfig{Rate: rate * float64(n) / 2, Burst: 1}}}
	}
	e := mustPolicy(b, p)
	loopDecide(b, e, pkts)
	b.StopTimer()
	s := e.Stats()
	b.ReportMetric(float64(s.Delayed)/float64(s.Packets), "delayed/op")
}

// BenchmarkDecideGlobal measures a global rule's Decide beside the same
// rule run locally, in one run: the global path spends the flow's lease
// with atomics (a source whose leases never run dry, so no refresher is
// involved; package global's BenchmarkDecideGlobalRedis runs it against a
// real store) and, in fallback, runs the local fallback limiter.
//
//	go test -run ^$ -bench DecideGlobal -benchmem ./shaper
func BenchmarkDecideGlobal(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = udp(i, uint16(i), 36)
		}
		run := func(b *testing.B, e *Engine, g *fakeGlobal) {
			loopDecideAfter(b, e, pkts, func() {
				if g != nil {
					for _, l := range g.leases {
						l.Grant(1<<60, noExpiry)
					}
				}
			})
		}
		c := Config{Rate: 1e6, Burst: 100, MaxFlows: n}
		b.Run(fmt.Sprintf("local/flows=%d", n), func(b *testing.B) {
			run(b, mustNew(b, c), nil)
		})
		b.Run(fmt.Sprintf("global/flows=%d", n), func(b *testing.B) {
			g := newFakeGlobal()
			g.q = nil // nothing consumes it here
			run(b, globalEngine(b, c, g), g)
		})
		b.Run(fmt.Sprintf("global-fallback/flows=%d", n), func(b *testing.B) {
			g := newFakeGlobal()
			g.q = nil
			lim, _ := NewLimiter(c.LimiterConfig())
			g.local.SetFallback(lim)
			run(b, globalEngine(b, c, g), g)
		})
	}
}

// BenchmarkLimiterAllow is the token bucket alone, one flow, packets 100 ns
// apart at 1e6 and 0.5 packets/s (the refill of a fraction of a nano-unit
// carried from call to call).
func BenchmarkLimiterAllow(b *testing.B) {
	for _, r := range []float64{1e6, 0.5} {
		b.Run(fmt.Sprintf("rate=%g", r), func(b *testing.B) {
			l, err := NewLimiter(LimiterConfig{Algorithm: TokenBucket, Rate: r, Burst: 100})
			if err != nil {
				b.Fatal(err)
			}
			var s State
			now := t0
			l.Reset(&s, now)
			b.ReportAllocs()
			for b.Loop() {
				now += 100
				l.Allow(&s, now, 1)
			}
		})
	}
}

// BenchmarkDecideTotal is BenchmarkDecide's engine without and with a
// total (a token bucket all its flows charge) in the same run: issue 32's
// bar is with ≤ 1.3 × without.
//
//	go test -run ^$ -bench DecideTotal -benchmem ./shaper
func BenchmarkDecideTotal(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = udp(i, uint16(i), 36)
		}
		for _, with := range []bool{false, true} {
			p := Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1e6, Burst: 100, MaxFlows: n}}}}
			name := "without"
			if with {
				name = "with"
				p.Rules[0].Total = "t"
				p.Totals = []Total{{Name: "t", Limit: TotalConfig{Rate: 1e9, Burst: 1000}}}
			}
			b.Run(fmt.Sprintf("%s/flows=%d", name, n), func(b *testing.B) { loopDecide(b, mustPolicy(b, p), pkts) })
		}
	}
}

// loopDecide times e.Decide over pkts in turn, 100 ns apart, once each has
// made its flow.
func loopDecide(b *testing.B, e *Engine, pkts [][]byte) { loopDecideAfter(b, e, pkts, nil) }

// loopDecideAfter is loopDecide calling ready once the flows are made,
// before the timing starts.
func loopDecideAfter(b *testing.B, e *Engine, pkts [][]byte, ready func()) {
	now := t0
	for i := range pkts {
		e.Decide(pkts[i], now)
	}
	if ready != nil {
		ready()
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		now += 100
		e.Decide(pkts[i], now)
		if i++; i == len(pkts) {
			i = 0
		}
	}
}
