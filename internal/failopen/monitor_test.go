package failopen

import (
	"github.com/packetshaper/packetshaper/nfq"

	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// These tests walk the Monitor's arithmetic (core) through samples of the
// kernel's queue table and rule readings, with time as an argument.

const ms = int64(time.Millisecond)

// sim drives a core: queues 0.. with maxLen, port 100+queue.
type sim struct {
	t    *testing.T
	c    *core
	log  bytes.Buffer
	now  int64
	ks   map[uint16]nfq.KernelStats // the table the next sample sees
	gone map[uint16]bool            // queues missing from it
}

func newSim(t *testing.T, cfg MonitorConfig, maxLen uint32, queues ...uint16) *sim {
	s := &sim{t: t, ks: map[uint16]nfq.KernelStats{}, gone: map[uint16]bool{}}
	cfg.Logger = slog.New(slog.NewTextHandler(&s.log, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	var infos []queueInfo
	for _, q := range queues {
		infos = append(infos, queueInfo{num: q, portID: 100 + uint32(q), maxLen: maxLen})
		s.ks[q] = nfq.KernelStats{PortID: 100 + uint32(q)}
	}
	s.c = newCore(infos, cfg)
	return s
}

// set sets what queue q shows at the next sample: packets waiting and ids
// consumed since the previous sample.
func (s *sim) set(q uint16, total uint64, ids uint64) {
	ks := s.ks[q]
	ks.QueueTotal = total
	ks.IDSequence += ids
	s.ks[q] = ks
}

func (s *sim) lookup(q uint16) (nfq.KernelStats, bool) {
	ks, ok := s.ks[q]
	return ks, ok && !s.gone[q]
}

// sample advances time by dt and samples.
func (s *sim) sample(dt int64) {
	s.now += dt
	s.c.sample(s.now, s.lookup)
}

// run takes n samples 100 ms apart, queue q showing total and ids at each.
func (s *sim) run(q uint16, n int, total, ids uint64) {
	for range n {
		s.set(q, total, ids)
		s.sample(100 * ms)
	}
}

// settle advances time by dt, samples and settles with rules.
func (s *sim) settle(dt int64, rules []QueueRule, err error) {
	s.now += dt
	s.c.sample(s.now, s.lookup)
	s.c.settle(s.now, rules, err)
}

// steady runs n samples 100 ms apart, each adding ids to every queue
// (not full), settling every 10th with rules.
func (s *sim) steady(n int, ids uint64, rules []QueueRule) {
	for i := 0; i < n; i++ {
		for q := range s.ks {
			s.set(q, 0, ids)
		}
		if (i+1)%10 == 0 {
			s.settle(100*ms, rules, nil)
		} else {
			s.sample(100 * ms)
		}
	}
}

func (s *sim) lines(substr string) int { return strings.Count(s.log.String(), substr) }

func rule(handle uint64, queue, queues uint16, packets uint64) QueueRule {
	return QueueRule{Family: "ip", Table: "filter", Chain: "INPUT", Handle: handle, Queue: queue, Queues: queues,
		Xt: true, HasCounter: true, Packets: packets}
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestCoreEstimate(t *testing.T) {
	s := newSim(t, MonitorConfig{EstimateOnly: true}, 100, 0)
	s.settle(0, nil, nil) // baseline
	s.steady(5, 100, nil) // 1000/s
	// It fills in the next interval (taking in 100), then serves 200/s
	// while full for 0.4 s, then drains.
	steps := []struct {
		total, ids uint64
		est        float64 // estimated so far
		secs       float64
		active     bool
	}{
		{100, 100, 0, 0.05, true}, // filled: arrivals 100, in 100
		{100, 20, 80, 0.15, true}, // 100 arrived, 20 got in
		{100, 20, 160, 0.25, true},
		{100, 20, 240, 0.35, true},
		{100, 20, 320, 0.45, true},
		{0, 100, 320, 0.50, false}, // drained: the 100 that arrived got in
		{0, 100, 320, 0.50, false},
	}
	for i, st := range steps {
		s.set(0, st.total, st.ids)
		s.sample(100 * ms)
		q := s.c.queue(0)
		if !near(q.est, st.est, 1e-6) || !near(q.secs, st.secs, 1e-6) || q.active != st.active {
			t.Errorf("step %d: est %.1f secs %.3f active %v, want %.1f %.3f %v", i, q.est, q.secs, q.active, st.est, st.secs, st.active)
		}
	}
	if got := s.c.queue(0).stats(); got.Passed != 0 {
		t.Errorf("before the settle: Passed %d, want 0 (estimates count at settles)", got.Passed)
	}
	s.settle(100*ms, nil, nil)
	got := s.c.queue(0).stats()
	if want := (FailOpenStats{Secs: 0.5, Passed: 320}); got.Passed != want.Passed || !near(got.Secs, want.Secs, 1e-6) || got.Exact || got.Active {
		t.Errorf("Stats = %+v, want %+v (not exact)", got, want)
	}
	if s.lines("fail-open ended") != 0 {
		t.Errorf("end logged within a second of the start:\n%s", s.log.String())
	}
	s.steady(10, 100, nil) // the next settle may log
	if s.lines("queue 0 full: packets pass without a verdict (fail-open)") != 1 ||
		s.lines("fail-open ended: 320 packets passed without a verdict in 0.5s (estimated from the arrival rate)") != 1 {
		t.Errorf("log:\n%s", s.log.String())
	}
	if s.lines("estimated from the arrival rate: rule counters not read (EstimateOnly)") != 1 {
		t.Errorf("the log does not say why it estimates:\n%s", s.log.String())
	}
}

// TestCoreStall: a gap in the samples (the process did not run) is
// accounted at the arrival rate, if the queue can have filled meanwhile.
func TestCoreStall(t *testing.T) {
	s := newSim(t, MonitorConfig{EstimateOnly: true}, 100, 0)
	s.settle(0, nil, nil)
	s.steady(10, 100, nil) // 1000/s
	// 2 s without a sample: 2000 arrived; 100 filled the queue, 50 got
	// in after the reader drained it; the rest passed.
	s.set(0, 0, 150)
	s.sample(2000 * ms)
	q := s.c.queue(0)
	if !near(q.est, 1850, 1e-6) || !near(q.secs, 1.85, 1e-6) {
		t.Errorf("after the gap: est %.1f secs %.3f, want 1850 1.85", q.est, q.secs)
	}
	s.steady(10, 100, nil)
	if got := q.stats(); got.Passed != 1850 {
		t.Errorf("Passed %d, want 1850", got.Passed)
	}
	if s.lines("fail-open ended: 1850 packets passed without a verdict in 1.9s, while packetshaper was stalled for 2.0s") != 1 {
		t.Errorf("log:\n%s", s.log.String())
	}

	// At 10/s, a 2 s gap takes in 20 < the 100 free: the queue cannot
	// have filled; nothing is estimated.
	s = newSim(t, MonitorConfig{EstimateOnly: true}, 100, 0)
	s.settle(0, nil, nil)
	s.steady(10, 1, nil)
	s.set(0, 0, 20)
	s.sample(2000 * ms)
	if q := s.c.queue(0); q.est != 0 || q.secs != 0 {
		t.Errorf("slow queue after a gap: est %.1f secs %.3f, want 0", q.est, q.secs)
	}
}

// TestCoreExact walks the exact count: rule packets − ids, a small
// negative difference carried, a large one switching to the estimate.
func TestCoreExact(t *testing.T) {
	s := newSim(t, MonitorConfig{}, 100, 0)
	r := rule(4, 0, 1, 1000)
	s.settle(0, []QueueRule{r}, nil)
	if !s.c.queue(0).stats().Exact || s.lines("counted exactly, from the counters of rule ip filter INPUT handle 4") != 1 {
		t.Fatalf("not exact at start:\n%s", s.log.String())
	}
	steps := []struct {
		rulePkts, ids uint64 // growth over the interval
		passed        uint64
		exact         bool
	}{
		{1000, 1000, 0, true},
		{1000, 700, 300, true},  // 300 passed
		{100, 110, 300, true},   // counters read before 10 ids: carried
		{100, 90, 300, true},    // ... and made up
		{100, 80, 320, true},    // 20 passed
		{100, 5000, 320, false}, // GSO: far more ids than rule hits
		{1000, 100, 320, false}, // estimated from now on (the queue was never seen full: 0)
		{0, 0, 320, false},
	}
	for i, st := range steps {
		r.Packets += st.rulePkts
		s.set(0, 0, st.ids)
		s.settle(1000*ms, []QueueRule{r}, nil)
		got := s.c.queue(0).stats()
		if got.Passed != st.passed || got.Exact != st.exact {
			t.Errorf("step %d: rule +%d, ids +%d: Passed %d Exact %v, want %d %v", i, st.rulePkts, st.ids, got.Passed, got.Exact, st.passed, st.exact)
		}
	}
	if s.lines("counted fewer packets (100) than the queue received (5000)") != 1 {
		t.Errorf("mismatch not logged once:\n%s", s.log.String())
	}
	// 300 passed between samples (never seen full): one line, and the
	// time at the average arrival rate (1000 hits/s: 0.3 s).
	if s.lines("300 packets passed without a verdict (fail-open) while the queue filled up between samples (exact, from the rule counters)") != 1 {
		t.Errorf("log:\n%s", s.log.String())
	}
	if q := s.c.queue(0); !near(q.secs, 0.3+0.2, 1e-6) {
		t.Errorf("Secs = %.3f, want 0.5 (300 at 1000/s, 20 at 100/s)", q.secs)
	}
}

// TestCoreGroups: which queues are counted exactly, and why not.
func TestCoreGroups(t *testing.T) {
	noCounter := rule(9, 3, 1, 0)
	noCounter.HasCounter = false
	computed := QueueRule{Family: "inet", Table: "t", Chain: "c", Handle: 2, Computed: true, Queues: 0}
	for i, tc := range []struct {
		rules []QueueRule
		err   error
		exact map[uint16]bool
		why   string
	}{
		{[]QueueRule{rule(1, 0, 2, 0), rule(2, 2, 1, 0), rule(3, 3, 1, 0)}, nil,
			map[uint16]bool{0: true, 1: true, 2: true, 3: true}, ""},
		{[]QueueRule{rule(1, 0, 4, 0)}, nil, // 0-3 balanced, but 3 is not ours
			map[uint16]bool{0: false, 1: false, 2: false, 3: true}, "rule ip filter INPUT handle 1 also sends to queues this monitor does not serve"},
		{[]QueueRule{rule(1, 0, 3, 0), noCounter}, nil,
			map[uint16]bool{0: true, 1: true, 2: true, 3: false}, "rule ip filter INPUT handle 9 has no counter"},
		{[]QueueRule{rule(1, 0, 3, 0)}, nil,
			map[uint16]bool{0: true, 1: true, 2: true, 3: false}, "no nf_tables rule sends to it (an iptables-legacy rule?)"},
		{[]QueueRule{rule(1, 0, 3, 0), rule(3, 3, 1, 0), computed}, nil,
			map[uint16]bool{0: false, 3: false}, "rule inet t c handle 2 takes its queue number from an expression"},
		{nil, errors.New("nfq: list nf_tables chains: permission denied"),
			map[uint16]bool{0: false, 3: false}, "cannot read the nf_tables rules: nfq: list nf_tables chains: permission denied"},
	} {
		s := newSim(t, MonitorConfig{}, 100, 0, 1, 2, 3)
		// 3 is the queue 0-3 balance rule's extra: ours here but not in step 1
		if i == 1 {
			s = newSim(t, MonitorConfig{}, 100, 0, 1, 2, 5)
			tc.exact = map[uint16]bool{0: false, 1: false, 2: false, 5: false}
		}
		s.settle(0, tc.rules, tc.err)
		for q, want := range tc.exact {
			if got := s.c.queue(q).stats().Exact; got != want {
				t.Errorf("case %d: queue %d Exact = %v, want %v\n%s", i, q, got, want, s.log.String())
			}
		}
		if tc.why != "" && !strings.Contains(s.log.String(), tc.why) {
			t.Errorf("case %d: log lacks %q:\n%s", i, tc.why, s.log.String())
		}
	}
}

// TestCoreBalance: one rule over two queues: the exact count is split by
// the queues' estimates, and the sum is exact.
func TestCoreBalance(t *testing.T) {
	s := newSim(t, MonitorConfig{}, 100, 0, 1)
	r := rule(1, 0, 2, 0)
	s.settle(0, []QueueRule{r}, nil)
	s.steady(9, 100, nil) // 1000/s each, no settle
	// nfq.Queue 0 full for 0.3 s (est 900); queue 1 full for 0.1 s (est ~250).
	s.set(0, 100, 100)
	s.set(1, 100, 100)
	s.sample(100 * ms)
	s.set(0, 100, 0)
	s.set(1, 0, 50)
	s.sample(100 * ms)
	s.set(0, 100, 0)
	s.set(1, 0, 100)
	s.sample(100 * ms)
	s.set(0, 0, 100)
	s.set(1, 0, 100)
	r.Packets = 2*900 + (100 + 0 + 0 + 100) + (100 + 50 + 100 + 100) + 1037 // ids consumed + 1037 passed
	s.settle(100*ms, []QueueRule{r}, nil)
	a, b := s.c.queue(0).stats(), s.c.queue(1).stats()
	tot := s.c.total()
	if a.Passed+b.Passed != 1037 || tot.Passed != 1037 || !tot.Exact || !a.Exact || !b.Exact {
		t.Errorf("%+v + %+v = %+v, want 1037 passed, exact", a, b, tot)
	}
	if a.Passed <= b.Passed {
		t.Errorf("queue 0 (full longer) got %d, queue 1 %d", a.Passed, b.Passed)
	}
	if !near(tot.Secs, 0.3, 1e-6) {
		t.Errorf("Total().Secs = %.3f, want 0.3 (the time one was full)", tot.Secs)
	}
}

// TestCoreRulesChange: the rules change while the queue is full: that
// interval is estimated, and Exact goes false for good.
func TestCoreRulesChange(t *testing.T) {
	s := newSim(t, MonitorConfig{}, 100, 0)
	r := rule(1, 0, 1, 0)
	s.settle(0, []QueueRule{r}, nil)
	s.steady(5, 100, nil)
	s.run(0, 1, 100, 100)
	s.run(0, 1, 100, 0) // est 100
	r2 := rule(2, 0, 1, 0)
	s.set(0, 0, 100)
	s.settle(100*ms, []QueueRule{r, r2}, nil)
	if got := s.c.queue(0).stats(); got.Exact || got.Passed != 100 {
		t.Errorf("Stats = %+v, want Passed 100 (estimated), not exact", got)
	}
	// Unbound for a sample while nothing was full: not tainted.
	s = newSim(t, MonitorConfig{}, 100, 0)
	s.settle(0, []QueueRule{r}, nil)
	s.gone[0] = true
	s.sample(100 * ms)
	s.gone[0] = false
	s.steady(10, 100, []QueueRule{r})
	if got := s.c.queue(0).stats(); !got.Exact || got.Passed != 0 {
		t.Errorf("after an unbound sample: %+v, want exact 0", got)
	}
}

// TestCoreLogRate: a queue that fills and drains at every sample for 5 s
// logs at most one line a second, and the lines account for everything.
func TestCoreLogRate(t *testing.T) {
	s := newSim(t, MonitorConfig{EstimateOnly: true}, 100, 0)
	s.settle(0, nil, nil)
	s.steady(10, 100, nil)
	for i := 0; i < 50; i++ {
		if i%2 == 0 {
			s.set(0, 100, 100)
		} else {
			s.set(0, 0, 50)
		}
		if (i+1)%10 == 0 {
			s.settle(100*ms, nil, nil)
		} else {
			s.sample(100 * ms)
		}
	}
	s.steady(20, 100, nil)
	s.c.finish(s.now)
	warns := s.lines("level=WARN")
	if warns > 6+1 {
		t.Errorf("%d warnings in 5 s:\n%s", warns, s.log.String())
	}
	var logged uint64
	for _, l := range strings.Split(s.log.String(), "\n") {
		if i := strings.Index(l, "failopen_passed="); i >= 0 {
			var n uint64
			for _, c := range l[i+len("failopen_passed="):] {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + uint64(c-'0')
			}
			logged += n
		}
	}
	if got := s.c.queue(0).stats(); logged != got.Passed || got.Passed == 0 {
		t.Errorf("lines account for %d packets, Stats %+v\n%s", logged, got, s.log.String())
	}
}

func TestSplit(t *testing.T) {
	for i, tc := range []struct {
		n    uint64
		w    []float64
		want []uint64
	}{
		{10, []float64{1}, []uint64{10}},
		{10, []float64{1, 1}, []uint64{5, 5}},
		{10, []float64{3, 1}, []uint64{8, 2}}, // 7.5 → 7 + remainder to the largest
		{3, []float64{1, 1, 1}, []uint64{1, 1, 1}},
		{2, []float64{1, 1, 1}, []uint64{1, 1, 0}},
		{0, []float64{1, 2}, []uint64{0, 0}},
	} {
		got := split(tc.n, append([]float64(nil), tc.w...))
		var sum uint64
		for _, x := range got {
			sum += x
		}
		if sum != tc.n || len(got) != len(tc.want) {
			t.Errorf("step %d: split(%d, %v) = %v: sum %d", i, tc.n, tc.w, got, sum)
			continue
		}
		for j := range got {
			if got[j] != tc.want[j] {
				t.Errorf("step %d: split(%d, %v) = %v, want %v", i, tc.n, tc.w, got, tc.want)
				break
			}
		}
	}
}

// TestCoreGSO: the kernel queues a GSO packet (one hit of the rule's
// counter) as its segments (one id each). Over intervals in which the
// queue could not fill, the counters counting fewer packets than the queue
// received is no mismatch: nothing passed, exactly, and no warning. Once
// the queue may have filled, what passed is estimated in segments, as the
// queue counts, and no longer exact.
func TestCoreGSO(t *testing.T) {
	s := newSim(t, MonitorConfig{}, 1000, 0)
	r := rule(4, 0, 1, 0)
	s.settle(0, []QueueRule{r}, nil)
	for i := range 5 {
		// 1 s of a TCP transfer: 100 GSO packets of 4.3 segments a
		// 100 ms sample, 430 ids, far below the 1000 free.
		s.run(0, 9, 3, 430)
		s.set(0, 3, 430)
		r.Packets += 1000
		s.settle(100*ms, []QueueRule{r}, nil)
		if got := s.c.queue(0).stats(); got.Passed != 0 || !got.Exact {
			t.Fatalf("second %d: Passed %d Exact %v, want 0 true", i, got.Passed, got.Exact)
		}
	}
	if n := s.lines("level=WARN"); n != 0 {
		t.Errorf("%d warnings for a transfer that never filled the queue:\n%s", n, s.log.String())
	}
	if s.lines("level=INFO msg=\"nfq: queue 0: the rules' counters counted fewer packets (1000) than the queue received (4300) while it could not fill: GSO packets") != 1 {
		t.Errorf("the segments not said once:\n%s", s.log.String())
	}
	// Now it fills, stays full for 0.3 s and drains: estimated (4300/s
	// arrivals, 100 got in each 100 ms: 330 passed in each of the four
	// intervals with a full end), not exact.
	s.run(0, 1, 1000, 997)
	s.run(0, 3, 1000, 100)
	s.set(0, 0, 100)
	r.Packets += 400
	s.settle(100*ms, []QueueRule{r}, nil)
	got := s.c.queue(0).stats()
	if got.Exact || got.Passed != 1320 {
		t.Errorf("after a fill: Passed %d Exact %v, want 4 × 330 estimated, not exact", got.Passed, got.Exact)
	}
}

// TestCoreIdle: a queue that no rule sends to and that has received no
// packet gets one warning, 5 s after start, with the command that adds
// the divert rule; a queue that receives packets (an iptables-legacy rule
// feeds it) or that a rule feeds gets none.
func TestCoreIdle(t *testing.T) {
	const want = "nfq: queue 0 has received no packet and no nf_tables rule sends to it: nothing is diverted, so nothing is shaped; add the divert rule: sudo packetshaper-rules add --queue 0 --policy FILE"
	s := newSim(t, MonitorConfig{}, 100, 0)
	s.settle(0, nil, nil)
	s.steady(40, 0, nil) // 4 s
	if s.lines("level=WARN") != 0 {
		t.Fatalf("warned before 5 s:\n%s", s.log.String())
	}
	s.steady(40, 0, nil)
	if s.lines("level=WARN msg=\""+want) != 1 || s.lines("level=WARN") != 1 {
		t.Errorf("want one warning %q:\n%s", want, s.log.String())
	}

	s = newSim(t, MonitorConfig{}, 100, 0)
	s.settle(0, nil, nil)
	s.steady(80, 1, nil) // packets arrive: a rule feeds it, unseen
	if s.lines("level=WARN") != 0 {
		t.Errorf("warned about a queue that receives packets:\n%s", s.log.String())
	}

	s = newSim(t, MonitorConfig{}, 100, 0)
	r := rule(4, 0, 1, 0)
	s.settle(0, []QueueRule{r}, nil)
	s.steady(80, 0, []QueueRule{r}) // a rule, no traffic yet
	if s.lines("level=WARN") != 0 {
		t.Errorf("warned about a queue a rule feeds:\n%s", s.log.String())
	}
}
