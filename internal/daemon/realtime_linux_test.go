package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/netnstest"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"golang.org/x/sys/unix"
)

// TestRealtimePriority runs the daemon with RealtimePriority in a child
// process (it makes the whole process real-time), in a namespace with a
// queue rule: every thread, those that existed and those the runtime
// starts afterwards, must be SCHED_FIFO at that priority, and packets
// still pass. Before issue 18 nfq.Open set it, once per queue; now Run
// does, once, before it opens the queues.
func TestRealtimePriority(t *testing.T) {
	const queue, prio, n = 9, 3, 200
	if netnstest.ChildMode() == "rt" {
		p := netnstest.NewUDPPair(t)
		comp := compile(t, "[[rule]]\nname = \"all\"\nmatch = { proto = [\"udp\"] }\npps = 1000000\nburst = 1000000\n")
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		cfg := Config{Queues: []uint16{queue}, RealtimePriority: prio, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		go func() { errc <- Run(ctx, cfg, testSource{comp}, comp, nil) }()
		// Make the runtime start threads: goroutines locked to threads
		// and blocked in the kernel at the same time.
		var wg sync.WaitGroup
		release := make(chan struct{})
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				<-release
			}()
		}
		// Run sets the priority before it binds the queue: until then
		// the rule's bypass passes packets without it, so wait for
		// the binding before sending (a loaded run checked too early).
		testutil.Eventually(t, 10*time.Second, func() bool { return queueBound(queue) }, "queue %d not bound within 10 s", queue)
		for i := 0; i < n; i++ {
			p.Send(t, uint16(i), 16)
		}
		if got := p.WaitCount(n, 3*time.Second); got != n {
			t.Errorf("received %d of %d packets", got, n)
		}
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			var tid int
			fmt.Sscan(e.Name(), &tid)
			a, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				continue // gone
			}
			if a.Policy != unix.SCHED_FIFO || a.Priority != prio {
				t.Errorf("thread %d: policy %d priority %d, want SCHED_FIFO (%d) priority %d", tid, a.Policy, a.Priority, unix.SCHED_FIFO, prio)
			}
		}
		close(release)
		wg.Wait()
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5 s of cancel")
		}
		fmt.Printf("THREADS=%d\n", len(ents))
		return
	}
	err := Run(context.Background(), Config{Queues: []uint16{queue}, RealtimePriority: MaxRealtimePriority + 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		testSource{}, compile(t, "[[rule]]\nname = \"all\"\nmatch = { proto = [\"udp\"] }\npps = 10\nburst = 1\n"), nil)
	var ue UsageError
	if !errors.As(err, &ue) || err.Error() != "real-time priority: 100 out of range (1..99, or 0 for none)" {
		t.Errorf("Run with priority 100: %v, want that UsageError", err)
	}
	netnstest.UnshareQueue(t, queue)
	out := netnstest.RunChild(t, "TestRealtimePriority", "rt", 0)
	if !strings.Contains(out, "THREADS=") || strings.Contains(out, "FAIL") {
		t.Errorf("child:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

// queueBound reports whether queue q is bound in this network namespace
// (a line of /proc/net/netfilter/nfnetlink_queue, whose first field is the
// queue number).
func queueBound(q uint16) bool {
	b, err := os.ReadFile("/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == fmt.Sprint(q) {
			return true
		}
	}
	return false
}

// TestRealtimeNotRoot re-runs this test binary as nobody to see the error
// for a real-time priority without CAP_SYS_NICE.
func TestRealtimeNotRoot(t *testing.T) {
	if netnstest.ChildMode() == "nobody" {
		err := setProcessRealtime(1)
		fmt.Printf("ERR=%v\n", err)
		if errors.Is(err, nfq.ErrPermission) {
			fmt.Println("IS_PERMISSION")
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (runs a child as nobody)")
	}
	out := netnstest.RunChild(t, "TestRealtimeNotRoot", "nobody", 65534)
	want := "ERR=real-time priority 1: permission denied: SCHED_FIFO needs root or CAP_SYS_NICE (or RLIMIT_RTPRIO >= 1)\n"
	if !strings.Contains(out, "IS_PERMISSION") || !strings.Contains(out, want) {
		t.Errorf("setProcessRealtime as nobody:\n%s", out)
	}
}

// testSource is a policy Source that is not a file.
type testSource struct{ c *policy.Compiled }

func (s testSource) Load() (*policy.Compiled, error) { return s.c, nil }
func (testSource) Reloadable() bool                  { return false }
func (testSource) Describe() string                  { return "test" }
