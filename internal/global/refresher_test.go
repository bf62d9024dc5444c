package global

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// The refresher under a fake store and a fake clock: each test takes the
// refresher's turns itself (Client.step) at times it chooses, so collect,
// consider, apply, the fallback and its share run step by step, with no
// server and no sleeps. The redis-server tests (lease_test.go and others)
// stay for the Lua script and the behaviour end to end.

// fakeStore answers asks as the script would for a store with plenty:
// each ask is granted what it wants, at most cap.
type fakeStore struct {
	mu       sync.Mutex
	fail     error // every request fails with it
	noScript int   // the next asks answer NOSCRIPT this many times
	cap      int64
	hosts    int64
	share    float64 // this host's share of the grants (own / total)
	left     int64   // the window (or rate lease) left a reply says, µs
	free     int64   // a rate lease's reply: the rate no lease holds, ×1000
	total    float64 // a rate lease's reply: all demands (0: 100)
	asks     []askArgs
	keys     []string
	loads    int
	pings    int
	asked    chan struct{} // signalled (without blocking) at each ask
}

func newFakeStore() *fakeStore {
	return &fakeStore{cap: 10, hosts: 1, share: 1, asked: make(chan struct{}, 1)}
}

func (s *fakeStore) ask(ctx context.Context, keys []string, args []askArgs, res []askResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.asked <- struct{}{}:
	default:
	}
	for i := range keys {
		s.keys = append(s.keys, keys[i])
		s.asks = append(s.asks, args[i])
		switch {
		case s.fail != nil:
			res[i] = askResult{err: s.fail}
		case s.noScript > 0:
			s.noScript--
			res[i] = askResult{err: errors.New("NOSCRIPT No matching script"), noScript: true}
		default:
			g := min(args[i].want, max(s.cap-args[i].held, 0))
			if args[i].rateLease {
				g = s.cap // (a rate lease is granted its share)
			}
			res[i] = askResult{rep: reply{granted: g, hosts: s.hosts, cap: s.cap, leftUs: s.left, own: s.share * 100, total: 100}}
			if args[i].rateLease {
				res[i].rep.waitUs = s.free
				if s.total > 0 {
					res[i].rep.total = s.total
				}
			}
		}
	}
}

func (s *fakeStore) loadScript(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	return s.fail
}

func (s *fakeStore) ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings++
	return s.fail
}

func (s *fakeStore) close() error { return nil }

func (s *fakeStore) nAsks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asks)
}

func (s *fakeStore) last() askArgs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asks[len(s.asks)-1]
}

// fakeClock is the engines' time, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now int64
}

func (c *fakeClock) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += int64(d)
	return c.now
}

func fkey(i int) flows.Key {
	k := flows.Key{Family: 4, Mode: flows.Src}
	k.Src[0], k.Src[3] = 10, byte(i)
	return k
}

// fakeClient is a token-lease client on st and clk, its refresher not
// running, with one global rule of 1000 packets/s, burst 100 (slack 10).
// (Rate leases: rateLeaseFake.)
func fakeClient(t *testing.T, st *fakeStore, clk *fakeClock) (*Client, *Rule) {
	t.Helper()
	c, err := newClient(Config{KeyPrefix: "t:", HostID: "h1", Clock: clk.get, TokenLeases: true}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	close(c.done) // no refresher goroutine: Close must not wait for one
	r, err := c.NewRule(RuleConfig{Name: "g", Limit: shaper.Config{Rate: 1000, Burst: 100, Global: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

func woken(c *Client) bool {
	select {
	case <-c.wake:
		return true
	default:
		return false
	}
}

// TestRefresherStepFake: a new key wakes the refresher and asks at its next
// turn; the grant lands in the lease (apply); spending below the low-water
// mark queues the lease, wakes the refresher, and the next turn asks again
// with what the lease still holds (collect, consider).
func TestRefresherStepFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	c, r := fakeClient(t, st, clk)
	woken(c) // drain anything before the key
	k := fkey(1)
	l := r.Lease(&k)
	if !woken(c) {
		t.Fatal("a new key did not wake the refresher")
	}
	if l.Until() != math.MaxInt64 || l.Tokens() != 0 {
		t.Fatalf("new lease: until %d tokens %d", l.Until(), l.Tokens())
	}
	// One packet with no grant yet: taken on the credit of one packet.
	now := clk.add(time.Millisecond)
	l.Take(now, 1)
	c.step(clk.get())
	if st.nAsks() != 1 || st.keys[0] != "t:{g|"+r.kc.Format(k)+"}" {
		t.Fatalf("asks %d keys %v, want one for the key", st.nAsks(), st.keys)
	}
	a := st.last()
	if a.charge != 1 || a.held != 0 || a.want < 1 || a.host != "h1" || a.rate != 1000 {
		t.Fatalf("first ask %+v: want a charge of the packet on credit, a want of at least 1", a)
	}
	granted := min(a.want, st.cap)
	if got := l.Tokens(); got != granted {
		t.Fatalf("after the grant the lease holds %d, want %d", got, granted)
	}
	if until := l.Until(); until != clk.get()+c.life {
		t.Fatalf("lease until %d, want now + the lease life %d", until, clk.get()+c.life)
	}
	// A turn with nothing new asks nothing.
	c.step(clk.add(time.Millisecond))
	if st.nAsks() != 1 {
		t.Fatalf("an idle turn asked: %d asks", st.nAsks())
	}
	// Spend it all, a packet a ms: the lease runs low, is queued and
	// wakes the refresher, which asks again.
	woken(c)
	for l.Tokens() > 0 {
		l.Take(clk.add(time.Millisecond), 1)
	}
	if !woken(c) {
		t.Fatal("a lease that ran low did not wake the refresher")
	}
	c.step(clk.get())
	if st.nAsks() != 2 {
		t.Fatalf("%d asks after the lease ran low, want 2", st.nAsks())
	}
	if a := st.last(); a.held != 0 || a.want < 1 {
		t.Fatalf("second ask %+v", a)
	}
	if s := r.Stats(); s.Asks != 2 || s.Granted < uint64(granted) || s.Fallback || s.Errors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRefresherFallbackFake: asks that fail for Timeout + Grace make the
// rule fall back to a local limit of its rate × this host's share of the
// grants (measured on the sweep before), or 1 / the most hosts seen when
// that is more; a probe that is answered puts it back on leases.
func TestRefresherFallbackFake(t *testing.T) {
	// A half of the grants, of 4 hosts; a sweep measures the share.
	st, clk, c, r, l := sweptFake(t, 4, 0.5, 2)
	if s := r.Stats(); s.Share != 0.5 || s.Hosts != 4 {
		t.Fatalf("after a sweep: share %v hosts %d, want 0.5 of 4", s.Share, s.Hosts)
	}
	// The store fails: the lease is spent, the ask fails.
	st.mu.Lock()
	st.fail = errors.New("connection refused")
	st.mu.Unlock()
	for l.Tokens() > 0 {
		l.Take(clk.add(time.Millisecond), 1)
	}
	l.Take(clk.add(time.Millisecond), 1) // unmet
	n0 := st.nAsks()
	c.step(clk.get())
	if st.nAsks() != n0+1 || r.Stats().Errors != 1 || r.Stats().Fallback {
		t.Fatalf("failed ask: asks %d (was %d), stats %+v", st.nAsks(), n0, r.Stats())
	}
	if c.failingSince != clk.get() {
		t.Fatalf("failingSince %d, want %d", c.failingSince, clk.get())
	}
	// Not yet Timeout + Grace: no fallback; then past it, the next
	// failed ask (due after its backoff) makes the rule fall back.
	if w := c.nextWake(clk.get()); w > c.failingSince+c.timeout+c.grace {
		t.Fatalf("next turn at %d, after the fallback's deadline %d", w, c.failingSince+c.timeout+c.grace)
	}
	c.step(clk.add(time.Duration(c.timeout)))
	if r.Stats().Fallback {
		t.Fatal("fell back before Timeout + Grace")
	}
	l.Take(clk.add(time.Duration(c.grace)), 1)
	c.step(clk.get())
	s := r.Stats()
	if !s.Fallback || r.Local().Fallback() == nil {
		t.Fatalf("no fallback after Timeout + Grace of failures: %+v", s)
	}
	if want := 1000 * 0.5; math.Abs(s.FallbackRate-want) > 1e-9 {
		t.Fatalf("fallback rate %v, want the rate × the share %v", s.FallbackRate, want)
	}
	if l.Tokens() > 0 {
		t.Fatalf("the lease kept %d tokens in fallback", l.Tokens())
	}
	// In fallback the turns only observe; a probe (every Probe) tries
	// the store: still failing, nothing changes.
	n1 := st.nAsks()
	c.step(clk.add(time.Millisecond))
	if st.nAsks() != n1 {
		t.Fatal("asked in fallback before a probe")
	}
	l.Demand(1) // the key stays active
	c.step(clk.add(time.Duration(c.probe)))
	if st.nAsks() != n1+1 || !r.Stats().Fallback {
		t.Fatalf("failing probe: asks %d (was %d), fallback %v", st.nAsks(), n1, r.Stats().Fallback)
	}
	// The store answers: the next probe asks for the active key, and
	// the rule is back on leases.
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	l.Demand(1)
	c.step(clk.add(time.Duration(c.probe)))
	if s := r.Stats(); s.Fallback || r.Local().Fallback() != nil || c.Stats().Fallback {
		t.Fatalf("still in fallback after an answered probe: %+v", s)
	}
	if l.Tokens() <= 0 {
		t.Fatalf("the probed key's lease holds %d after the return", l.Tokens())
	}
}

// sweptFake is a fake client whose store says share of the grants of
// hosts hosts, after key i's lease is taken, asked for and a sweep.
func sweptFake(t *testing.T, hosts int64, share float64, i int) (*fakeStore, *fakeClock, *Client, *Rule, *shaper.Lease) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.hosts, st.share = hosts, share
	c, r := fakeClient(t, st, clk)
	k := fkey(i)
	l := r.Lease(&k)
	l.Take(clk.add(time.Millisecond), 1)
	c.step(clk.get())
	c.step(clk.add(time.Duration(c.sweep)))
	return st, clk, c, r, l
}

// TestRefresherFallbackHostsFake: with a smaller share than 1 / the most
// hosts seen, the fallback takes 1 / hosts.
func TestRefresherFallbackHostsFake(t *testing.T) {
	st, clk, c, r, l := sweptFake(t, 4, 0.1, 3)
	st.mu.Lock()
	st.fail = errors.New("down")
	st.mu.Unlock()
	for !r.Stats().Fallback {
		l.Take(clk.add(10*time.Millisecond), 1)
		c.step(clk.get())
		if r.Stats().Errors > 100 {
			t.Fatal("no fallback")
		}
	}
	if s := r.Stats(); math.Abs(s.FallbackRate-1000.0/4) > 1e-9 {
		t.Fatalf("fallback rate %v, want rate / 4 hosts", s.FallbackRate)
	}
}

// TestRefresherNoScriptFake: a store that lost the script gets it loaded
// and the ask again, in the same turn.
func TestRefresherNoScriptFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.noScript = 1
	c, r := fakeClient(t, st, clk)
	k := fkey(4)
	l := r.Lease(&k)
	l.Take(clk.add(time.Millisecond), 1)
	c.step(clk.get())
	if st.nAsks() != 2 || st.loads != 1 || l.Tokens() <= 0 || r.Stats().Errors != 0 {
		t.Fatalf("asks %d loads %d tokens %d stats %+v", st.nAsks(), st.loads, l.Tokens(), r.Stats())
	}
}

// TestRefresherIdleWakesPerSweep: with nothing to do, the refresher's next
// turn is a Sweep away (not a Poll: no 1000 turns a second); an ask
// scheduled earlier (a fixed window's next one) brings it forward.
func TestRefresherIdleWakesPerSweep(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	c, _ := fakeClient(t, st, clk)
	now := clk.add(time.Millisecond)
	c.step(now)
	if w := c.nextWake(now); w != c.lastSweep+c.sweep || w-now < c.sweep/2 {
		t.Fatalf("idle: next turn in %v, want at the next sweep (%v)", time.Duration(w-now), time.Duration(c.sweep))
	}
	fw, err := c.NewRule(RuleConfig{Name: "fw", Limit: shaper.Config{Rate: 1000, Burst: 100, Global: true, Algorithm: shaper.FixedWindow, Window: int64(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	k := fkey(5)
	l := fw.Lease(&k)
	l.Take(clk.add(time.Millisecond), 1)
	c.step(clk.get())
	now = clk.get()
	if fw.due.Len() == 0 {
		t.Fatal("the fixed window's next ask is not scheduled")
	}
	if w := c.nextWake(now); w != min(fw.due.Top().at, c.lastSweep+c.sweep) {
		t.Fatalf("next turn %d, want the scheduled ask %d or the sweep %d", w, fw.due.Top().at, c.lastSweep+c.sweep)
	}
}

// TestRefresherRunOnDemand: the running refresher, Sweep an hour, asks for
// a new key and for a lease that ran low when they come (it is woken), and
// takes only the turns they need meanwhile (no Poll ticker).
func TestRefresherRunOnDemand(t *testing.T) {
	for _, tok := range []bool{true, false} {
		t.Run(map[bool]string{true: "token", false: "rate"}[tok], func(t *testing.T) { runOnDemand(t, tok) })
	}
}

func runOnDemand(t *testing.T, tokenLeases bool) {
	st := newFakeStore()
	st.left = 2_000_000 // (a rate lease's 2 s)
	c, err := newClient(Config{KeyPrefix: "t:", Sweep: time.Hour, TokenLeases: tokenLeases}, st)
	if err != nil {
		t.Fatal(err)
	}
	go c.run()
	t.Cleanup(func() { c.Close() })
	r, err := c.NewRule(RuleConfig{Name: "g", Limit: shaper.Config{Rate: 1000, Burst: 100, Global: true}})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for !cond() {
			select {
			case <-st.asked:
			case <-deadline.C:
				t.Fatalf("%s: no ask within 30 s (asks %d, turns %d)", what, st.nAsks(), c.turns.Load())
			}
		}
	}
	k := fkey(6)
	l := r.Lease(&k)
	wait("a new key", func() bool { return st.nAsks() >= 1 })
	for i := 0; i < 1000 && l.Tokens() > 0; i++ {
		l.Take(c.clock(), 1)
	}
	l.Take(c.clock(), 1)
	wait("a lease run low", func() bool { return st.nAsks() >= 2 })
	// Then idle for a while (an observation window: load can only make
	// fewer turns). Each turn had a cause: the first (at start), the key,
	// the lease, perhaps one more for a wake that raced a turn. A Poll
	// ticker would take one a millisecond: about 200 here.
	<-time.After(200 * time.Millisecond)
	t.Logf("%d turns (2 asks, then 200 ms idle)", c.turns.Load())
	if n := c.turns.Load(); n > 8 {
		t.Errorf("%d turns for 2 asks with Sweep an hour: the refresher polls", n)
	}
}

// TestRateRenewalLeadFake: a rate lease is renewed before it ends by the
// lead (a poll and four round trips), at most a quarter interval: with
// round trips of about 0.5 s (1 000 refreshers on two loaded cores) the
// lead, 2.1 s, is longer than the lease left (1.5 s), and every renewal was due
// at once (asks 2.1-3.6 × hosts ÷ interval in BenchmarkFleet), and its
// low-water mark above what the lease may hold.
func TestRateRenewalLeadFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.cap, st.left = 500_000, 1_500_000 // (its share 500/s, the lease 1.5 s)
	c, err := newClient(Config{KeyPrefix: "t:", HostID: "h1", Clock: clk.get}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	close(c.done)
	r, err := c.NewRule(RuleConfig{Name: "g", Limit: shaper.Config{Rate: 1000, Burst: 100, Global: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.rtt = 0.6e9
	k := fkey(1)
	l := r.Lease(&k)
	l.Take(clk.add(time.Millisecond), 1)
	c.step(clk.get())
	if st.nAsks() != 1 || l.Until() != clk.get()+st.left*1000 {
		t.Fatalf("%d asks, lease until %d: want one ask, a lease of 1.5 s", st.nAsks(), l.Until()-clk.get())
	}
	// Its low-water mark is what its rate makes in that quarter interval
	// at most (125), within what it may hold (500): not 1 051, which woke
	// the refresher at every packet.
	if e := r.m[k]; e.low != 125 || e.low > e.cap {
		t.Fatalf("low-water mark %d (cap %d), want 125", e.low, e.cap)
	}
	// Active, a packet every 10 ms: asked again a sixteenth of an
	// interval after its first grant (500/s, more than twice the demand
	// it saw, one packet), then, granted 100/s (not twice its 100/s:
	// more would be asked again soon while the key is young), renewed
	// once an interval (up to 2 % early), before the lease ends.
	st.mu.Lock()
	st.cap = 100_000
	st.mu.Unlock()
	iv := time.Duration(c.interval)
	for i, want := range [][2]time.Duration{{iv / 16, iv/16 + 10*time.Millisecond}, {iv * 98 / 100, iv}} {
		renewed := time.Duration(0)
		for d := 10 * time.Millisecond; d < 1500*time.Millisecond && renewed == 0; d += 10 * time.Millisecond {
			l.Take(clk.add(10*time.Millisecond), 1)
			c.step(clk.get())
			if st.nAsks() > i+1 {
				renewed = d
			}
		}
		if renewed < want[0] || renewed > want[1] {
			t.Fatalf("ask %d %v after the grant before: want %v to %v, before the lease ends (1.5 s)", i+2, renewed, want[0], want[1])
		}
	}
}

// rateLeaseFake is a rate-lease client on st at clk's time, its refresher
// stepped by the test (c.step), and the lease of one key of a 1 000/s rule.
func rateLeaseFake(t *testing.T, st *fakeStore, clk *fakeClock) (*Client, *shaper.Lease) {
	t.Helper()
	c, err := newClient(Config{KeyPrefix: "t:", HostID: "h1", Clock: clk.get}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	close(c.done)
	r, err := c.NewRule(RuleConfig{Name: "g", Limit: shaper.Config{Rate: 1000, Burst: 100, Global: true}})
	if err != nil {
		t.Fatal(err)
	}
	k := fkey(1)
	l := r.Lease(&k)
	return c, l
}

// TestRateFreeFake: a host whose demand is above its rate asks again a
// quarter interval after its grant while a tenth of the rate is held by no
// lease (the shares granted before summed to less than the rate), and a
// whole interval after it when all is held.
func TestRateFreeFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.cap, st.left = 10_000, 1_500_000 // (its share 10/s of 1 000/s, the lease 1.5 s)
	c, l := rateLeaseFake(t, st, clk)
	// A packet every 10 ms (100/s, above its 10/s): the time between
	// asks, with 500/s held by no lease at the second grant, none at the
	// third.
	var at []time.Duration
	var since time.Duration
	for i := 0; i < 300 && len(at) < 4; i++ {
		if n := st.nAsks(); n == 1 {
			st.free = 500_000 // (the second ask's reply)
		} else if n == 2 {
			st.free = 0
		}
		l.Take(clk.add(10*time.Millisecond), 1)
		since += 10 * time.Millisecond
		n := st.nAsks()
		c.step(clk.get())
		if st.nAsks() > n {
			at, since = append(at, since), 0
		}
	}
	iv := time.Duration(c.interval)
	if len(at) < 4 || at[2] != iv/4 || at[3] < iv*98/100 || at[3] > iv {
		t.Fatalf("asks %v apart: want the third a quarter interval (%v) after the second (500/s free), the fourth an interval after the third (none free)", at, iv/4)
	}
}

// TestRateReleaseFake: a host whose demand falls below half its rate, of a
// key whose demands may take the rate, asks again at once (a quarter
// interval after its last ask at the soonest) to give the rest back, not at
// its renewal an interval later.
func TestRateReleaseFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.cap, st.left, st.total = 500_000, 1_500_000, 2000 // (its share 500/s of 1 000/s, demands 2 000/s)
	c, l := rateLeaseFake(t, st, clk)
	// 400/s (4 every 10 ms) for 2.5 s, then nothing: the time from the
	// last ask before the demand stopped to the next.
	var last, stop time.Duration
	asks := st.nAsks()
	for d := 10 * time.Millisecond; d < 4*time.Second; d += 10 * time.Millisecond {
		clk.add(10 * time.Millisecond)
		if d < 2500*time.Millisecond {
			l.Take(clk.get(), 4)
		} else if stop == 0 {
			stop = d
		}
		c.step(clk.get())
		if n := st.nAsks(); n > asks {
			asks = n
			if stop != 0 {
				if d-stop > 400*time.Millisecond {
					t.Fatalf("asked %v after the ask before, %v after the demand stopped: want within half an interval", d-last, d-stop)
				}
				return
			}
			last = d
		}
	}
	t.Fatalf("no ask in 1.5 s after the demand stopped (the last %v before)", stop-last)
}

// TestRateNothingLeftFake: a reply whose rate lease has nothing left (the
// script never gives one; a hostile or broken store may) is asked again
// after a sixteenth of an interval, not at once: e2e TestHostileStoreE2E's
// host asked about 1 000 times a second.
func TestRateNothingLeftFake(t *testing.T) {
	st, clk := newFakeStore(), &fakeClock{now: 1e18}
	st.cap, st.left = 100_000, 0 // (100/s, ending as it is granted)
	c, l := rateLeaseFake(t, st, clk)
	for range 100 { // a packet a ms for 100 ms
		l.Take(clk.add(time.Millisecond), 1)
		c.step(clk.get())
	}
	if n := st.nAsks(); n > 2 {
		t.Fatalf("%d asks in 100 ms, want at most 2 (one per sixteenth of an interval)", n)
	}
}
