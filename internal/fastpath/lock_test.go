//go:build linux

package fastpath

import (
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
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(1.0), Burst: ptr(float64(burst))}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	if err := p.SetNow(1_700_000_000_000_000_000); err != nil {
		t.Fatal(err)
	}
	fr := build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)
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
			_, errs[cpu] = p.Prog().Run(&ebpf.RunOptions{Data: fr, Repeat: n})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := p.RuleCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets on 2 CPUs: %d accepted, %d dropped, %d punted", c.Packets, c.Accepted, c.Dropped, c.Punted)
	if c.Packets != 2*n || c.Accepted != burst || c.Dropped != 2*n-burst {
		t.Errorf("%d packets, %d accepted, %d dropped: want %d, %d, %d (one bucket of %d across the CPUs)", c.Packets, c.Accepted, c.Dropped, 2*n, burst, 2*n-burst, burst)
	}
}
