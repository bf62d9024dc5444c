package shaper

import (
	"sync"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
)

// fakeGlobal is a Global whose leases the test fills by hand.
type fakeGlobal struct {
	mu     sync.Mutex
	q      *LeaseQueue
	leases map[flows.Key]*Lease
	local  LocalLimit
	full   bool // Lease returns nil
	calls  int
}

func newFakeGlobal() *fakeGlobal {
	return &fakeGlobal{q: NewLeaseQueue(16), leases: map[flows.Key]*Lease{}}
}

func (g *fakeGlobal) Lease(k *flows.Key) *Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.full {
		return nil
	}
	l := g.leases[*k]
	if l == nil || l.Retired() {
		l = NewLease(g.q, nil)
		g.leases[*k] = l
	}
	return l
}

func (g *fakeGlobal) Local() *LocalLimit { return &g.local }

func (g *fakeGlobal) only(t *testing.T) *Lease {
	t.Helper()
	if len(g.leases) != 1 {
		t.Fatalf("%d leases, want 1", len(g.leases))
	}
	for _, l := range g.leases {
		return l
	}
	return nil
}

func globalEngine(t testing.TB, c Config, g Global) *Engine {
	t.Helper()
	c.Global = true
	e, err := NewPolicy(Policy{Rules: []Rule{{Name: "g", Limit: c, Global: g}}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestGlobalLeaseSteps walks one key's lease through its life: the credit
// of one packet before the first grant, spending a grant, the low-water
// mark queueing the lease, expiry, and the engine taking a new lease when
// the old one is retired.
func TestGlobalLeaseSteps(t *testing.T) {
	g := newFakeGlobal()
	e := globalEngine(t, Config{Rate: 10, Burst: 5, Key: flows.KeyConfig{Mode: flows.Dst}}, g)
	p := udp(1, 1000, 10)
	popped := func() int {
		n := 0
		g.q.Pop(func(*Lease) { n++ })
		return n
	}
	step := func(i int, now int64, want Verdict) {
		t.Helper()
		if got := e.Decide(p, now); got != want {
			t.Fatalf("step %d: Decide at %d = %v, want %v", i, now, got, want)
		}
	}
	step(1, t0, Accept) // credit: one packet
	l := g.only(t)
	if l.Tokens() != -1 {
		t.Fatalf("tokens after the credit = %d, want -1", l.Tokens())
	}
	step(2, t0, Drop) // no more credit
	if popped() != 1 {
		t.Fatal("a refused take did not queue the lease")
	}
	if d := l.TakeDemand(); d != 1 {
		t.Errorf("demand = %d, want 1", d)
	}
	// The source charges the credit and grants 3: it adds 1 + 3.
	l.SetLow(2)
	l.Grant(4, t0+100)
	step(3, t0+1, Accept) // 2 left
	if popped() != 0 {
		t.Fatal("queued above the low-water mark")
	}
	step(4, t0+2, Accept) // 1 left: below low
	if popped() != 1 {
		t.Fatal("not queued below the low-water mark")
	}
	step(5, t0+3, Accept) // 0 left
	step(6, t0+4, Drop)   // floor 0 now: no credit
	l.Grant(2, 0)
	step(7, t0+99, Accept)
	step(8, t0+100, Drop) // expired, 1 token left
	if n := l.Expire(); n != 1 {
		t.Errorf("Expire dropped %d tokens, want 1", n)
	}
	l.Retire()
	calls := g.calls
	step(9, t0+200, Accept) // a new lease, with its credit
	if g.calls != calls+1 {
		t.Errorf("Lease called %d times after the retirement, want 1", g.calls-calls)
	}
	if nl := g.only(t); nl == l || nl.Tokens() != -1 {
		t.Errorf("the engine did not take the new lease's credit")
	}
	rs := e.RuleStats(0)
	if rs.Packets != 9 || rs.Accepted != 6 || rs.Dropped != 3 || rs.Flows != 1 {
		t.Errorf("RuleStats = %+v", rs)
	}
}

// TestGlobalFallback: with a fallback limiter set, the engine limits each
// flow of the rule with it (counted as Fallback), starting spent (what the
// leases spent is not known here: a full bucket would be a fresh burst each
// time the store fails), and still reports demand; cleared, the leases
// decide again; a second fallback starts spent again.
func TestGlobalFallback(t *testing.T) {
	g := newFakeGlobal()
	e := globalEngine(t, Config{Rate: 10, Burst: 5}, g)
	lim, err := NewLimiter(LimiterConfig{Rate: 1, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := udp(1, 1000, 10)
	e.Decide(p, t0) // makes the lease, spends the credit
	l := g.only(t)
	g.local.SetFallback(lim)
	var got []Verdict
	for i := range 3 {
		got = append(got, e.Decide(p, t0+int64(i)))
	}
	got = append(got, e.Decide(p, t0+1e9), e.Decide(p, t0+1e9+1)) // one token earned in 1 s
	want := []Verdict{Drop, Drop, Drop, Accept, Drop}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("fallback packet %d: %v, want %v", i, got[i], want[i])
		}
	}
	if d := l.TakeDemand(); d != 5 {
		t.Errorf("demand in fallback = %d, want 5", d)
	}
	if s := e.RuleStats(0); s.Fallback != 5 {
		t.Errorf("Fallback = %d, want 5", s.Fallback)
	}
	g.local.SetFallback(nil)
	l.Grant(1+1, noExpiry)
	if e.Decide(p, t0+2e9) != Accept || e.Decide(p, t0+2e9+1) != Drop {
		t.Error("back on the lease: want one accept, then a drop")
	}
	// The store fails again, long after: a new fallback limiter (a new
	// share) starts spent too, whatever the time since the last one.
	lim2, _ := NewLimiter(LimiterConfig{Rate: 1, Burst: 2})
	g.local.SetFallback(lim2)
	if e.Decide(p, t0+100e9) != Drop {
		t.Error("a second fallback gave a fresh burst")
	}
}

// TestGlobalOverflow: a flow that got no lease is limited by the overflow
// limiter, and dropped before one is set.
func TestGlobalOverflow(t *testing.T) {
	g := newFakeGlobal()
	g.full = true
	e := globalEngine(t, Config{Rate: 10, Burst: 5}, g)
	p := udp(1, 1000, 10)
	if e.Decide(p, t0) != Drop {
		t.Error("no lease, no overflow limiter: want a drop")
	}
	lim, _ := NewLimiter(LimiterConfig{Rate: 1, Burst: 1})
	g.local.SetOverflow(lim)
	if e.Decide(p, t0) != Accept || e.Decide(p, t0) != Drop {
		t.Error("overflow limiter of burst 1: want an accept, then a drop")
	}
}

// TestGlobalWithoutSource: a global rule without a source runs as a local
// one (replay).
func TestGlobalWithoutSource(t *testing.T) {
	e, err := NewPolicy(Policy{Rules: []Rule{{Name: "g", Limit: Config{Rate: 10, Burst: 2, Global: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := udp(1, 1000, 10)
	got := []Verdict{e.Decide(p, t0), e.Decide(p, t0), e.Decide(p, t0)}
	if got[0] != Accept || got[1] != Accept || got[2] != Drop {
		t.Errorf("verdicts %v, want a local bucket of 2", got)
	}
}

func TestGlobalConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Rate: 10, Global: true, Algorithm: SlidingWindow},
		{Rate: 10, Global: true, Algorithm: SlidingWindowCounter},
		{Rate: 10, Global: true, GlobalSlack: 1.5},
		{Rate: 10, Global: true, GlobalSlack: -0.1},
		{Rate: 10, GlobalSlack: 0.1},
	} {
		if err := c.Check(); err == nil {
			t.Errorf("Check(%+v) = nil, want an error", c)
		}
	}
	for _, c := range []Config{
		{Rate: 10, Global: true},
		{Rate: 10, Global: true, Algorithm: FixedWindow, GlobalSlack: 1},
	} {
		if err := c.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", c, err)
		}
	}
}

// TestGlobalReloadKeepsLeases: a reload keeps an unchanged global rule's
// flows, and their leases until the source retires them.
func TestGlobalReloadKeepsLeases(t *testing.T) {
	g := newFakeGlobal()
	c := Config{Rate: 10, Burst: 5, Global: true}
	e, err := NewPolicy(Policy{Rules: []Rule{{Name: "g", Limit: c, Global: g}}})
	if err != nil {
		t.Fatal(err)
	}
	p := udp(1, 1000, 10)
	e.Decide(p, t0)
	l := g.only(t)
	l.Grant(3, noExpiry) // 2 left after the credit's charge
	g2 := newFakeGlobal()
	ne, kept, err := e.Reload(Policy{Rules: []Rule{{Name: "g", Limit: c, Global: g2}}})
	if err != nil || len(kept) != 1 {
		t.Fatalf("Reload: kept %v, %v", kept, err)
	}
	if ne.Decide(p, t0) != Accept || ne.Decide(p, t0) != Accept || ne.Decide(p, t0) != Drop {
		t.Error("the kept flow does not spend its old lease")
	}
	l.Retire() // the old source closes
	if ne.Decide(p, t0) != Accept || len(g2.leases) != 1 {
		t.Error("after the retirement the flow does not take a lease from the new source")
	}
	// Global to local is a changed rule.
	c.Global = false
	_, kept, err = ne.Reload(Policy{Rules: []Rule{{Name: "g", Limit: c}}})
	if err != nil || len(kept) != 0 {
		t.Errorf("global to local: kept %v, %v", kept, err)
	}
}

// TestGlobalNoAllocs: zero allocations per packet on the global path, on a
// lease and in fallback, for known flows.
func TestGlobalNoAllocs(t *testing.T) {
	for _, algo := range []Algorithm{TokenBucket, FixedWindow} {
		g := newFakeGlobal()
		e := globalEngine(t, Config{Algorithm: algo, Rate: 100, MaxFlows: 1000}, g)
		pkts := make([][]byte, 500)
		for i := range pkts {
			pkts[i] = udp(i, 1, 8)
		}
		now := t0
		for _, p := range pkts {
			e.Decide(p, now)
		}
		for _, l := range g.leases {
			l.Grant(1<<40, noExpiry)
		}
		i := 0
		run := func() {
			now += 1000
			e.Decide(pkts[i%len(pkts)], now)
			i++
			g.q.Pop(func(*Lease) {})
		}
		if n := testing.AllocsPerRun(10000, run); n != 0 {
			t.Errorf("%v on leases: %v allocs per Decide", algo, n)
		}
		lim, _ := NewLimiter(LimiterConfig{Algorithm: algo, Rate: 50, Burst: 5, Window: DefaultWindow})
		g.local.SetFallback(lim)
		if n := testing.AllocsPerRun(10000, run); n != 0 {
			t.Errorf("%v in fallback: %v allocs per Decide", algo, n)
		}
	}
}

// TestLeaseQueueConcurrent: leases taken by several goroutines at once are
// each queued while low, and every one queued is popped.
func TestLeaseQueueConcurrent(t *testing.T) {
	q := NewLeaseQueue(64)
	ls := make([]*Lease, 32)
	for i := range ls {
		ls[i] = NewLease(q, i)
		ls[i].Grant(1+1000, noExpiry)
		ls[i].SetLow(1 << 30) // every take queues
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				ls[(i+w)%len(ls)].Take(t0, 1)
			}
		}()
	}
	seen := map[int]int{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		q.Pop(func(l *Lease) { seen[l.Owner.(int)]++ })
	}
	q.Pop(func(l *Lease) { seen[l.Owner.(int)]++ })
	var spent int64
	for i, l := range ls {
		spent += 1001 - l.Tokens()
		if seen[i] == 0 {
			t.Errorf("lease %d never popped", i)
		}
		if l.queued.Load() != 0 && !q.Overflowed() {
			t.Errorf("lease %d still marked queued", i)
		}
	}
	if spent != 4000 {
		t.Errorf("%d tokens spent, want 4000", spent)
	}
}
