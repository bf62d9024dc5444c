//go:build linux

package fastpath

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/policy"
)

// TestStateLockAcrossCPUs: one flow's packets decided on two CPUs at once
// (BPF_PROG_TEST_RUN with repeat, one thread pinned to each CPU) share one
// bucket exactly: at a fixed time (no refill), a bucket of burst B accepts
// exactly B of the 2 × n > B packets. A state changed by two CPUs at once
// (no lock) loses decrements and accepts more.
func TestStateLockAcrossCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	const n, burst = 400_000, 500_000
	p := loadAt(t, &policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(1.0), Burst: ptr(float64(burst))}}}, 1_700_000_000_000_000_000)
	fr := build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)
	onTwoCPUs(t, p, [2][]byte{fr, fr}, n)
	c, err := p.RuleCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets on 2 CPUs: %d accepted, %d dropped, %d punted", c.Packets, c.Accepted, c.Dropped, c.Punted)
	// A packet whose CPU waits out LOCK_SPINS for the other (a vCPU the
	// hypervisor stalled while it held the lock: 1 in 800 000 under the
	// race stage's load) goes to user space uncharged, as flowstate.h
	// says; every packet charged shares the one bucket, so exactly burst
	// are accepted whatever the punts, and the rest are dropped or punted.
	const maxPunted = 2 * n / 1000
	if c.Packets != 2*n || c.Accepted != burst || c.Dropped+c.Punted != 2*n-burst || c.Punted > maxPunted {
		t.Errorf("%d packets, %d accepted, %d dropped, %d punted: want %d, %d, %d dropped or punted, at most %d punted (one bucket of %d across the CPUs)",
			c.Packets, c.Accepted, c.Dropped, c.Punted, 2*n, burst, 2*n-burst, maxPunted, burst)
	}
}

// onTwoCPUs runs frs[i] n times on CPU i (BPF_PROG_TEST_RUN with repeat,
// one thread pinned to each CPU), both at once.
func onTwoCPUs(t *testing.T, p *Program, frs [2][]byte, n uint32) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for cpu := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[cpu] = err
				return
			}
			_, errs[cpu] = p.Prog().Run(&ebpf.RunOptions{Data: frs[cpu], Repeat: n})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTotalLockAcrossCPUs: two rules' keys, each on its own CPU at once,
// charge one total in the kernel: at a fixed time (no refill), a total of
// burst B accepts exactly B of the 2 × n > B packets, however the CPUs
// interleave (its state changed under its own lock), the keys' limits far
// above it.
func TestTotalLockAcrossCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	const n, burst = 400_000, 500_000
	f := &policy.File{
		Totals: []policy.TotalDef{{Name: "up", PPS: ptr(1.0), Burst: ptr(float64(burst))}},
		Rules: []policy.Rule{
			{Name: "udp", PPS: ptr(1.0), Burst: ptr(1e6), Total: "up", Match: &policy.Match{Proto: []string{"udp"}}},
			{Name: "tcp", PPS: ptr(1.0), Burst: ptr(1e6), Total: "up", Match: &policy.Match{Proto: []string{"tcp"}}},
		},
	}
	p := loadAt(t, f, 1_700_000_000_000_000_000)
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1")
	onTwoCPUs(t, p, [2][]byte{build(flowDesc{a, b, 17, 4000, 5000}, 64), build(flowDesc{a, b, 6, 4000, 5000}, 64)}, n)
	var acc, punted uint64
	for i := range 2 {
		c, err := p.RuleCounters(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rule %s: %d packets, %d accepted, %d dropped, %d punted", f.Rules[i].Name, c.Packets, c.Accepted, c.Dropped, c.Punted)
		acc, punted = acc+c.Accepted, punted+c.Punted
	}
	tc, _, err := p.TotalCounters("up")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("total: %+v", tc)
	// As in TestStateLockAcrossCPUs, a packet whose CPU waits out
	// LOCK_SPINS goes to user space uncharged; every other shares the
	// one total.
	if acc != burst || tc.Accepted != burst || tc.Dropped+punted != 2*n-burst || punted > 2*n/1000 {
		t.Errorf("%d accepted (the total's %d), %d refused by the total, %d punted: want %d accepted, the rest refused or punted (at most %d)", acc, tc.Accepted, tc.Dropped, punted, burst, 2*n/1000)
	}
}

// TestNewFlowsMoveAndEviction: a flow's first packet puts it in the map of
// new flows, its second moves it (state and all) to the map of flows; when
// that map has since evicted it, its next packet starts it afresh (as in
// one LRU map), neither punted nor stuck on the marker the move left.
func TestNewFlowsMoveAndEviction(t *testing.T) {
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(1.0), Burst: ptr(2.0)}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	fr := &frame{b: build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)}
	now := int64(1_700_000_000_000_000_000)
	count := func(m *ebpf.Map) int {
		n := 0
		_, err := readFlows(m, 0, func(_ *fastpathFlowKey, s *fastpathFlowState) error {
			if lockOf(s) != fastpathLockStateLOCK_MOVED {
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	step := func(what string, want, inMain, inNew int) {
		t.Helper()
		v, mark, _ := run(t, p, fr, now)
		if v != want || mark&s.PuntMark != 0 {
			t.Errorf("%s: verdict %d mark %#x, want %d unpunted", what, v, mark, want)
		}
		if m, n := count(p.tables[0]), count(p.news[0]); m != inMain || n != inNew {
			t.Errorf("%s: %d flows in flows, %d in flows_new, want %d and %d", what, m, n, inMain, inNew)
		}
	}
	step("first packet", tcOK, 0, 1)
	step("second packet", tcOK, 1, 0)
	step("third packet", tcShot, 1, 0)
	var k fastpathFlowKey
	if err := p.tables[0].NextKey(nil, &k); err != nil {
		t.Fatal(err)
	}
	if err := p.tables[0].Delete(&k); err != nil { // as an eviction would
		t.Fatal(err)
	}
	step("after the eviction", tcOK, 0, 1)
	step("and the next", tcOK, 1, 0)
	step("and the next", tcShot, 1, 0)
	if n, err := p.FlowCount(0); err != nil || n != 1 {
		t.Errorf("FlowCount %d %v, want 1", n, err)
	}
}

// TestNewFlowsRoundRobin: flows sent round robin, more of them than a
// tenth of the rule's max-flows, still move to the map of flows at their
// second packet and share one bucket each: at a fixed time (no refill), a
// bucket of 1 accepts 1 of each flow's 3 packets. (With a map of new flows
// of a tenth of max-flows, each packet found its flow evicted from it and
// started afresh: 3 of 3.)
func TestNewFlowsRoundRobin(t *testing.T) {
	const flows, maxFlows = 500, 1000 // half: an LRU map evicts before it is full
	p := loadAt(t, &policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(1.0), Burst: ptr(1.0), Key: "5tuple", MaxFlows: ptr(maxFlows)}}}, 1_700_000_000_000_000_000)
	fr := build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)
	accepted := 0
	for range 3 {
		for i := range flows {
			binary.BigEndian.PutUint16(fr[14+20:], uint16(10000+i))
			ret, err := p.Prog().Run(&ebpf.RunOptions{Data: fr})
			if err != nil {
				t.Fatal(err)
			}
			if ret == tcOK {
				accepted++
			}
		}
	}
	if accepted != flows {
		t.Errorf("%d flows round robin, 3 packets each, bucket 1: %d accepted, want %d", flows, accepted, flows)
	}
}
