package shaper

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
)

// twoLevel is the exact model of a rule with a total, computed apart from
// the limiters: each key a token bucket of integer rate (packets/s, so
// nano-units per ns) and burst, the total a token bucket or a fixed window.
// A packet passes iff its key's bucket and the total both hold one packet;
// it is then taken from both, and only then.
type twoLevel struct {
	keyRate, keyBurst int64
	keys              map[int]*[2]int64 // tokens (nano-units), last
	window            int64             // > 0: the total is a fixed window
	totRate, totBurst int64             // token bucket (packets/s, packets); window: limit per window
	tok, last         int64             // total's tokens and time (bucket) or count and window index
	started           bool
}

func (m *twoLevel) decide(key int, now int64) (ok, overTotal bool) {
	k := m.keys[key]
	if k == nil {
		k = &[2]int64{m.keyBurst * nano, now}
		m.keys[key] = k
	}
	kt := min(m.keyBurst*nano, k[0]+m.keyRate*(now-k[1]))
	var tt int64
	if m.window > 0 {
		tt = m.tok
		if w := now / m.window; !m.started || w != m.last {
			tt = 0
		}
		if tt+1 > m.totRate*m.window/sec {
			return false, true
		}
	} else {
		if !m.started {
			m.tok, m.last = m.totBurst*nano, now
		}
		tt = min(m.totBurst*nano, m.tok+m.totRate*(now-m.last))
		if tt < nano {
			return false, true
		}
	}
	if kt < nano {
		return false, false
	}
	k[0], k[1] = kt-nano, now
	m.started = true
	if m.window > 0 {
		m.tok, m.last = tt+1, now/m.window
	} else {
		m.tok, m.last = tt-nano, now
	}
	return true, false
}

// keyAndTotal is a one-rule policy whose flows (one per source) are
// limited to keyRate/keyBurst and which charges the total tc.
func keyAndTotal(t testing.TB, keyRate, keyBurst float64, tc TotalConfig) *Engine {
	t.Helper()
	return mustPolicy(t, Policy{
		Rules:  []Rule{{Name: "r", Limit: Config{Rate: keyRate, Burst: keyBurst}, Total: "all"}},
		Totals: []Total{{Name: "all", Limit: tc}},
	})
}

// TestTotalExactModel: with seeded random traffic of 1 to 1 000 keys, a
// rule with a total decides every packet as the two-level model does, and
// the total's counters are the model's. Without the check-then-take (the
// flow charged though the total refused, or the total charged though the
// flow refused) the model and the engine part within a few packets.
func TestTotalExactModel(t *testing.T) {
	for _, tc := range []struct {
		name            string
		keys            int
		keyRate, keyB   int64
		tot             TotalConfig
		meanGap         int64 // ns between packets
		window          int64
		totRate, totBur int64
	}{
		{"8 keys, bucket", 8, 100, 5, TotalConfig{Rate: 400, Burst: 20}, sec / 1600, 0, 400, 20},
		{"1 key, bursts apart", 1, 30, 20, TotalConfig{Rate: 40, Burst: 2}, sec / 200, 0, 40, 2},
		{"1000 keys, bucket", 1000, 2, 2, TotalConfig{Rate: 500, Burst: 50}, sec / 2000, 0, 500, 50},
		{"50 keys, fixed window", 50, 20, 4, TotalConfig{Algorithm: FixedWindow, Rate: 300, Window: sec / 10}, sec / 1000, sec / 10, 300, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := keyAndTotal(t, float64(tc.keyRate), float64(tc.keyB), tc.tot)
			m := &twoLevel{keyRate: tc.keyRate, keyBurst: tc.keyB, keys: map[int]*[2]int64{}, window: tc.window, totRate: tc.totRate, totBurst: tc.totBur}
			rng := rand.New(rand.NewPCG(32, uint64(tc.keys)))
			pkts := make([][]byte, tc.keys)
			for i := range pkts {
				pkts[i] = udp(i, 1000, 8)
			}
			now := t0
			var acc, over, n uint64
			var d Decision
			for i := 0; i < 40_000; i++ {
				now += rng.Int64N(2 * tc.meanGap) // equal times too
				k := rng.IntN(tc.keys)
				e.DecidePacket(pkts[k], nil, now, &d)
				ok, ot := m.decide(k, now)
				if (d.Verdict == Accept) != ok || d.OverTotal != ot || d.Exceeded == ok {
					t.Fatalf("packet %d (key %d, t0%+d): verdict %v over total %v exceeded %v, model: pass %v over total %v", i, k, now-t0, d.Verdict, d.OverTotal, d.Exceeded, ok, ot)
				}
				n++
				if ok {
					acc++
				}
				if ot {
					over++
				}
			}
			if got, want := e.TotalStats(0), (TotalStats{Packets: n, Accepted: acc, Dropped: over}); got != want {
				t.Errorf("total's counters %+v, want %+v", got, want)
			}
			if over == 0 || n-acc-over == 0 {
				t.Errorf("the traffic must meet both limits: %d over the total, %d over their key", over, n-acc-over)
			}
		})
	}
}

// TestTotalSharedByRules: a named total charged by two rules of different
// keys and costs caps both together: a packet rule and a byte rule, each
// far below its own limit, share 10 packets of a 10-packet bucket.
func TestTotalSharedByRules(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules: []Rule{
			{Name: "a", Limit: Config{Rate: 1000, Burst: 100}, Total: "up"},
			{Name: "b", Limit: Config{Rate: 1e6, Bytes: true, Key: flows.KeyConfig{Mode: flows.Src}}, Total: "up"},
		},
		Classifier: ruleByDport{ports: []uint16{1, 2}, noPorts: -1},
		Totals:     []Total{{Name: "up", Limit: TotalConfig{Rate: 1e-3, Burst: 10}}},
	})
	passed := 0
	for i := 0; i < 40; i++ {
		if e.Decide(udpTo(i, 7, uint16(1+i%2)), t0) == Accept {
			passed++
		}
	}
	if passed != 10 {
		t.Errorf("%d of 40 packets passed a 10-packet total shared by two rules, want 10", passed)
	}
	if s := e.TotalStats(0); s.Accepted != 10 || s.Dropped != 30 {
		t.Errorf("total counters %+v", s)
	}
	if a, b := e.RuleStats(0), e.RuleStats(1); a.Accepted != 5 || b.Accepted != 5 || a.Dropped+b.Dropped != 30 {
		t.Errorf("rule counters %+v, %+v", a, b)
	}
}

// TestTotalShadowAndMark: a packet over the total is over the limit: a
// shadow rule accepts it (ShadowDropped), a marking rule marks it, and in
// neither case is the flow or the total charged for it: the flow's own
// bucket still holds what it held.
func TestTotalShadowAndMark(t *testing.T) {
	for _, r := range []Rule{
		{Name: "shadow", Shadow: true},
		{Name: "mark", MarkExceeded: true, Mark: 0x10, MarkMask: 0xf0},
	} {
		r.Limit, r.Total = Config{Rate: 1e-3, Burst: 5}, "t"
		e := mustPolicy(t, Policy{Rules: []Rule{r}, Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 1e-3, Burst: 2}}}})
		var d Decision
		for i := 0; i < 4; i++ {
			e.DecidePacket(udp(1, 1, 8), nil, t0, &d)
			if d.Verdict != Accept || d.Exceeded != (i >= 2) || d.OverTotal != (i >= 2) || d.SetMark != (r.MarkExceeded && i >= 2) {
				t.Errorf("%s packet %d: %+v", r.Name, i, d)
			}
		}
		s := e.RuleStats(0)
		if r.Shadow && s.ShadowDropped != 2 || r.MarkExceeded && (s.Marked != 2 || d.Mark != 0x10) {
			t.Errorf("%s: rule counters %+v, mark %#x", r.Name, s, d.Mark)
		}
		// The flow was charged for two packets only: three are left.
		var left float64
		fi, _ := e.AppendFlows(nil, 0, 0, 1<<20, t0)
		if len(fi) == 1 {
			left = fi[0].Left
		}
		if left != 3 {
			t.Errorf("%s: the flow has %v left, want 3 (charged for the two packets the total passed only)", r.Name, left)
		}
	}
}

// TestTotalTimeBackwards: time going backwards grants a total nothing.
func TestTotalTimeBackwards(t *testing.T) {
	e := keyAndTotal(t, 1000, 100, TotalConfig{Rate: 10, Burst: 2})
	for i, step := range []struct {
		now  int64
		pass bool
	}{
		{t0, true}, {t0, true}, {t0, false},
		{t0 + sec/10, true}, {t0, false}, {t0 - sec, false}, {t0 + sec/10, false},
		{t0 + 2*sec/10, true},
	} {
		if got := e.Decide(udp(i, 1, 8), step.now) == Accept; got != step.pass {
			t.Errorf("step %d: Decide(t0%+d) passed %v, want %v", i, step.now-t0, got, step.pass)
		}
	}
}

// TestTotalReload: a reload keeps a total's state when its name and limit
// are unchanged, and starts it afresh when its limit changes.
func TestTotalReload(t *testing.T) {
	p := Policy{
		Rules:  []Rule{{Name: "r", Limit: Config{Rate: 1000, Burst: 100}, Total: "t"}},
		Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 1e-3, Burst: 3}}},
	}
	e := mustPolicy(t, p)
	for i := 0; i < 3; i++ {
		e.Decide(udp(i, 1, 8), t0)
	}
	ne, _, err := e.Reload(p)
	if err != nil {
		t.Fatal(err)
	}
	if ne.Decide(udp(9, 1, 8), t0) != Drop || ne.TotalStats(0).Accepted != 3 {
		t.Errorf("the reloaded total forgot its state: %+v", ne.TotalStats(0))
	}
	p.Totals = []Total{{Name: "t", Limit: TotalConfig{Rate: 1e-3, Burst: 4}}}
	if ne, _, err = ne.Reload(p); err != nil {
		t.Fatal(err)
	}
	if ne.Decide(udp(9, 1, 8), t0) != Accept {
		t.Errorf("a changed total kept its old state")
	}
}

// TestTotalPolicyErrors: what a total cannot be, each refused with its
// reason.
func TestTotalPolicyErrors(t *testing.T) {
	tot := []Total{{Name: "t", Limit: TotalConfig{Rate: 10}}}
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}, Total: "u"}}, Totals: tot}, `no total named "u"`},
		{Policy{Rules: []Rule{{Name: "r", Action: ActionAccept, Total: "t"}}, Totals: tot}, "for limit rules"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1, Shape: true}, Total: "t"}}, Totals: []Total{{Name: "t", Limit: TotalConfig{Algorithm: FixedWindow, Rate: 10}}}}, "shaping rule's total is a token bucket"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1, Shape: true, MaxDelay: int64(time.Second)}, Total: "t"}}, Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 2e9}}}}, "max delay"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1, Global: true}, Total: "t", Global: newFakeGlobal()}}, Totals: tot}, "global rule"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}}}, Totals: []Total{{Name: "t", Limit: TotalConfig{Algorithm: SlidingWindow, Rate: 1}}}}, "not sliding-window"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}}}, Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 0}}}}, "total t: rate must be"},
		{Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}}}, Totals: append(tot, tot...)}, "declared twice"},
	} {
		_, err := NewPolicy(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.p.Rules[0], err, tc.want)
		}
	}
}

// TestTotalNoAllocs: a decision with a total allocates nothing.
func TestTotalNoAllocs(t *testing.T) {
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindowCounter} {
		e := keyAndTotal(t, 100, 5, TotalConfig{Algorithm: algo, Rate: 1e4})
		pkts := make([][]byte, 2000)
		for i := range pkts {
			pkts[i] = udp(i, 1, 8)
		}
		now, i := t0, 0
		for _, p := range pkts {
			e.Decide(p, now)
		}
		if n := testing.AllocsPerRun(20000, func() {
			now += 1000
			e.Decide(pkts[i%len(pkts)], now)
			i++
		}); n != 0 {
			t.Errorf("%v: %v allocs per Decide with a total", algo, n)
		}
	}
}

// TestTotalCost: a packet whose cost is given (Meta.Cost: a GSO packet's
// segments) costs a byte total its bytes and a packet flow its packets, and
// a later fragment refused at its first (NeedOver) is refused without
// meeting the total.
func TestTotalCost(t *testing.T) {
	e := mustPolicy(t, Policy{
		Rules:  []Rule{{Name: "r", Limit: Config{Rate: 1e-3, Burst: 10}, Total: "t"}},
		Totals: []Total{{Name: "t", Limit: TotalConfig{Rate: 1e-3, Bytes: true, Burst: 10000}}},
	})
	var d Decision
	m := &Meta{Cost: Cost{Set: true, Packets: 3, Bytes: 4000}}
	for i, want := range []Verdict{Accept, Accept, Drop} {
		e.DecidePacket(udp(1, 1, 8), m, t0, &d)
		if d.Verdict != want || d.OverTotal != (want == Drop) {
			t.Errorf("packet %d of 4000 bytes, 3 segments: %v (over total %v), want %v", i, d.Verdict, d.OverTotal, want)
		}
	}
	fi, _ := e.AppendFlows(nil, 0, 0, 1<<20, t0)
	if left := e.TotalLeft(0, t0); left != 2000 || len(fi) != 1 || fi[0].Left != 4 {
		t.Errorf("left: total %v bytes (want 2000), flows %+v (want 4 packets)", left, fi)
	}
	m.Cost.Need = NeedOver
	e.DecidePacket(udp(1, 1, 8), m, t0, &d)
	if d.Verdict != Drop || d.OverTotal || e.TotalStats(0).Packets != 3 {
		t.Errorf("NeedOver: %+v, total %+v", d, e.TotalStats(0))
	}
}
