package nfq

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/internal/timing"

	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// openQueue opens a queue, closed when the test ends, and applies the
// test options to it.
func openQueue(t testing.TB, c Config, opts ...testOption) *Queue {
	t.Helper()
	q := netnstest.Open(t, Open, c)
	for _, o := range opts {
		o(q)
	}
	return q
}

// pairQueue makes a namespace whose divert rule sends to c.Queue
// (netnstest.UnshareQueue) and returns a UDP pair in it and the queue
// opened with c and opts.
func pairQueue(t testing.TB, c Config, opts ...testOption) (*netnstest.UDPPair, *Queue) {
	t.Helper()
	netnstest.UnshareQueue(t, c.Queue)
	p := netnstest.NewUDPPair(t)
	return p, openQueue(t, c, opts...)
}

// sendAll sends n datagrams of size bytes (sequence numbers 0 to n-1) and
// waits for all n to arrive.
func sendAll(t testing.TB, p *netnstest.UDPPair, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), size)
	}
	if got := p.WaitCount(int64(n), 5*time.Second); got != int64(n) {
		t.Fatalf("%d of %d datagrams arrived", got, n)
	}
}

// setFlag sets the bind flag *f to v for the test.
func setFlag(t *testing.T, f *uint32, v uint32) {
	old := *f
	*f = v
	t.Cleanup(func() { *f = old })
}

// logLines is a Config.Logf that keeps each line, and a function that
// returns the lines kept so far.
func logLines() (logf func(format string, args ...any), lines func() []string) {
	var mu sync.Mutex
	var logs []string
	return func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, fmt.Sprintf(format, args...))
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(logs)
		}
}

// blast writes b.N copies of payload, unpaced, waits (up to timeout) for
// them to arrive and stops b's timer.
func blast(b *testing.B, p *netnstest.UDPPair, payload []byte, timeout time.Duration) {
	b.Helper()
	for i := 0; i < b.N; i++ {
		if _, err := p.Tx.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
	p.WaitCount(int64(b.N), timeout)
	b.StopTimer()
}

// runQueue runs q in a goroutine and returns a stop function that cancels
// it and returns how long Run took to return and its error.
func runQueue(t testing.TB, q *Queue, fn Handler) (stop func() (time.Duration, error)) {
	t.Helper()
	return netnstest.RunQueue(t, q, fn)
}

// seqOf returns the sequence number in a queued UDP/IPv4 packet's payload.
func seqOf(p *Packet) (uint16, bool) { return netnstest.SeqOf(p.Data) }

func TestVerdictsReachTheKernel(t *testing.T) {
	const queue, n = 7, 400
	p, q := pairQueue(t, Config{Queue: queue, BatchSize: 16})
	var bad atomic.Int64
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		for i := range batch {
			seq, ok := seqOf(&batch[i])
			if !ok {
				bad.Add(1)
				continue
			}
			// Drop in runs of varying length, so that batches mix verdicts.
			if seq%7 < 3 {
				v[i].Action = Drop
			}
		}
	})
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), 32)
	}
	want := 0
	for i := 0; i < n; i++ {
		if i%7 >= 3 {
			want++
		}
	}
	// Every packet answered, as many received as accepted, and nothing
	// more waiting in the receiver's socket (an accepted packet reaches it
	// within the verdict's write, over lo): a wrongly accepted packet
	// would be counted by now.
	if !testutil.WaitFor(t, 5*time.Second, func() bool {
		return q.Stats().Packets == n && p.N.Load() >= int64(want) && p.Pending() == 0
	}) {
		t.Errorf("after 5 s: Stats %+v, received %d, %d bytes unread; want Packets %d, received %d, none unread", q.Stats(), p.N.Load(), p.Pending(), n, want)
	}
	got := p.N.Load()
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	p.Mu.Lock()
	for i := 0; i < n; i++ {
		accepted := i%7 >= 3
		if c := p.Got[uint16(i)]; (c == 1) != accepted || c > 1 {
			t.Errorf("packet %d arrived %d times; accepted = %v", i, c, accepted)
		}
	}
	p.Mu.Unlock()
	if got != int64(want) {
		t.Errorf("received %d packets, want %d", got, want)
	}
	if bad.Load() != 0 {
		t.Errorf("%d packets without a readable sequence number", bad.Load())
	}
	s := q.Stats()
	if s.Packets != n || s.Accepted != uint64(want) || s.Dropped != uint64(n-want) {
		t.Errorf("Stats = %+v, want Packets %d Accepted %d Dropped %d", s, n, want, n-want)
	}
	if s.Errors != 0 {
		t.Errorf("Stats.Errors = %d", s.Errors)
	}
	t.Logf("stats: %+v", s)
}

func TestCopyRangeAndLength(t *testing.T) {
	const queue = 3
	p, q := pairQueue(t, Config{Queue: queue, CopyRange: 64})
	type seen struct{ data, length, id int }
	var mu sync.Mutex
	var got []seen
	var hw uint16
	var hook uint8
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, pk := range batch {
			got = append(got, seen{len(pk.Data), pk.Len, int(pk.ID)})
			hw, hook = pk.HWProtocol, pk.Hook
		}
	})
	p.Send(t, 1, 1000) // 20 + 8 + 1000 = 1028 bytes: cut to 64
	p.Send(t, 2, 10)   // 38 bytes: whole
	p.WaitCount(2, 2*time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("handler saw %d packets, want 2", len(got))
	}
	if got[0].data != 64 || got[0].length != 1028 {
		t.Errorf("big packet: len(Data) = %d, Len = %d; want 64, 1028", got[0].data, got[0].length)
	}
	if got[1].data != 38 || got[1].length != 38 {
		t.Errorf("small packet: len(Data) = %d, Len = %d; want 38, 38", got[1].data, got[1].length)
	}
	if got[1].id <= got[0].id {
		t.Errorf("ids not increasing: %d then %d", got[0].id, got[1].id)
	}
	if hook != 3 { // NF_INET_LOCAL_OUT
		t.Errorf("Hook = %d, want 3 (OUTPUT)", hook)
	}
	t.Logf("HWProtocol on OUTPUT = %#x", hw)
}

func TestSecondBindFails(t *testing.T) {
	const queue = 5
	netnstest.UnshareQueue(t, queue)
	openQueue(t, Config{Queue: queue})
	q2, err := Open(Config{Queue: queue})
	if err == nil {
		q2.Close()
		t.Fatal("second Open of the same queue succeeded")
	}
	if !errors.Is(err, ErrBusy) {
		t.Errorf("second Open: %v; want an error wrapping ErrBusy", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "nfq: queue 5: queue already bound by another process") || strings.Contains(msg, "\n") {
		t.Errorf("second Open: error message %q is not the expected one line", msg)
	}
	// A different queue is still free.
	openQueue(t, Config{Queue: queue + 1})
}

// TestNotRoot re-runs this test binary as nobody, in the same namespace,
// to see the error a user without CAP_NET_ADMIN gets. (The one for a
// real-time priority without CAP_SYS_NICE: daemon's TestRealtimeNotRoot.)
func TestNotRoot(t *testing.T) {
	if netnstest.ChildMode() != "" {
		_, err := Open(Config{Queue: 1})
		fmt.Printf("ERR=%v\n", err)
		if errors.Is(err, ErrPermission) {
			fmt.Println("IS_PERMISSION")
		}
		return
	}
	netnstest.UnshareQueue(t, 1)
	for mode, want := range map[string]string{
		"plain": "ERR=nfq: queue 1: permission denied: binding an NFQUEUE queue needs root (CAP_NET_ADMIN)\n",
	} {
		out := netnstest.RunChild(t, "TestNotRoot", mode, 65534)
		if !strings.Contains(out, "IS_PERMISSION") || !strings.Contains(out, want) {
			t.Errorf("Open as nobody (%s):\n%s", mode, out)
		}
	}
}

// TestFailOpenWhenStalled: a queue nobody reads fills up; then the kernel
// accepts the rest (fail-open) or drops it (FailClosed). Once Run starts,
// the packets held in the queue get their verdicts.
func TestFailOpenWhenStalled(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailClosed=%v", failClosed), func(t *testing.T) {
			const queue, n, maxLen = 2, 100, 16
			p, q := pairQueue(t, Config{Queue: queue, MaxQueueLen: maxLen, FailClosed: failClosed})
			for i := 0; i < n; i++ {
				p.Send(t, uint16(i), 16)
			}
			want := int64(n - maxLen)
			if failClosed {
				want = 0
			}
			got := p.Settle(2 * time.Second)
			if got != want {
				t.Errorf("while stalled: received %d, want %d", got, want)
			}
			ks, err := q.KernelStats()
			if err != nil {
				t.Fatal(err)
			}
			// The kernel counts fail-open accepts nowhere, and fail-closed
			// drops as queue_dropped.
			wantDropped := uint64(0)
			if failClosed {
				wantDropped = n - maxLen
			}
			if ks.QueueTotal != maxLen || ks.QueueDropped != wantDropped || ks.IDSequence != maxLen {
				t.Errorf("KernelStats = %+v, want QueueTotal %d, QueueDropped %d, IDSequence %d", ks, maxLen, wantDropped, maxLen)
			}
			stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
			got = p.WaitCount(want+maxLen, 2*time.Second)
			if got != want+maxLen {
				t.Errorf("after Run: received %d, want %d", got, want+maxLen)
			}
			if _, err := stop(); err != nil {
				t.Fatal(err)
			}
			if s := q.Stats(); s.Packets != maxLen {
				t.Errorf("Stats.Packets = %d, want %d", s.Packets, maxLen)
			}
		})
	}
}

// TestFinalKernelStats: after Run returns (and after Close without Run),
// KernelStats gives the counters the kernel had just before the unbind,
// not ErrNotBound: the final stats line must show the queue's drops.
func TestFinalKernelStats(t *testing.T) {
	const queue, n, maxLen = 2, 100, 16
	p, q := pairQueue(t, Config{Queue: queue, MaxQueueLen: maxLen, FailClosed: true})
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), 16)
	}
	p.Settle(time.Second)
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	if got := p.WaitCount(maxLen, 2*time.Second); got != maxLen {
		t.Fatalf("received %d, want %d", got, maxLen)
	}
	before, err := q.KernelStats()
	if err != nil {
		t.Fatal(err)
	}
	if before.QueueDropped != n-maxLen || before.IDSequence != maxLen || before.QueueTotal != 0 {
		t.Fatalf("while running: KernelStats = %+v, want QueueDropped %d, IDSequence %d, QueueTotal 0", before, n-maxLen, maxLen)
	}
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := readKernelStats(queue); !errors.Is(err, ErrNotBound) {
		t.Errorf("after Run: /proc error = %v, want ErrNotBound", err)
	}
	after, err := q.KernelStats()
	if err != nil || after != before {
		t.Errorf("after Run: KernelStats = %+v, %v; want %+v, nil", after, err, before)
	}

	// Close without Run: the same, and the packets still queued are
	// accepted before the unbind (which would drop them), unread.
	q2 := openQueue(t, Config{Queue: queue + 1, MaxQueueLen: maxLen})
	netnstest.Run(t, "", "iptables", "-I", "OUTPUT", "-p", "udp", "--dport", fmt.Sprint(netnstest.TestPort+1), "-j", "NFQUEUE", "--queue-num", fmt.Sprint(queue+1))
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: netnstest.TestPort + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: netnstest.TestPort + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for i := 0; i < 5; i++ {
		tx.Write([]byte("x"))
	}
	before, _ = q2.KernelStats()
	if before.QueueTotal != 5 {
		t.Fatalf("before Close: KernelStats = %+v, want 5 queued", before)
	}
	if err := q2.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	want := before
	want.QueueTotal = 0
	if after, err := q2.KernelStats(); err != nil || after != want {
		t.Errorf("after Close: KernelStats = %+v, %v; want %+v (the 5 queued accepted), nil", after, err, want)
	}
	if s := q2.Stats(); s.StopAccepted != 5 || s.Packets != 0 {
		t.Errorf("after Close: Stats = %+v, want StopAccepted 5, Packets 0", s)
	}
	rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 16)
	for i := 0; i < 5; i++ {
		if _, err := rx.Read(buf); err != nil {
			t.Fatalf("after Close: %d of 5 queued packets arrived: %v", i, err)
		}
	}
}

// TestSurvivesENOBUFS: with a tiny socket buffer and nobody reading, the
// kernel cannot deliver most packets (it accepts them: fail-open) and marks
// the socket overrun. Run then reports ENOBUFS, logs it, counts the packets
// that never arrived from the gap in the ids, and keeps going.
func TestSurvivesENOBUFS(t *testing.T) {
	const queue, n = 6, 200
	netnstest.UnshareQueue(t, queue)
	p := netnstest.NewUDPPair(t)
	var logged atomic.Int64
	var logLine atomic.Value
	q := openQueue(t, Config{Queue: queue, ReadBuffer: 4096, Logf: func(f string, a ...any) {
		logged.Add(1)
		logLine.Store(fmt.Sprintf(f, a...))
	}})
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), 16)
	}
	// Most packets fail open at once; the few in the socket wait.
	stalled := p.Settle(2 * time.Second)
	if stalled < n/2 || stalled == n {
		t.Fatalf("while stalled: received %d of %d; want most but not all (socket too big?)", stalled, n)
	}
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	p.WaitCount(n, 2*time.Second)
	p.Send(t, n, 16) // its id shows the gap
	if got := p.WaitCount(n+1, 2*time.Second); got != n+1 {
		t.Errorf("received %d of %d", got, n+1)
	}
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	s := q.Stats()
	if s.ENOBUFS == 0 {
		t.Errorf("Stats.ENOBUFS = 0, want > 0")
	}
	if want := uint64(n + 1 - s.Packets); s.Lost != want {
		t.Errorf("Stats.Lost = %d, want %d (%d packets answered of %d)", s.Lost, want, s.Packets, n+1)
	}
	if logged.Load() != 1 {
		t.Errorf("Logf called %d times, want 1 (rate-limited)", logged.Load())
	} else if l := logLine.Load().(string); !strings.Contains(l, "ENOBUFS") {
		t.Errorf("log line %q does not mention ENOBUFS", l)
	}
	t.Logf("stalled: %d passed; stats %+v; log %q", stalled, s, logLine.Load())
}

// TestIdleRunParks: with no traffic, Run's goroutine is parked in the
// runtime's netpoller, like a net.Conn read: neither inside a system call
// nor running (a blocking recvmmsg, through Syscall6 or RawSyscall6), which
// keep the runtime's system monitor awake and cost CPU at moderate load
// ("Why Run waits in the netpoller"). The next packet wakes it, and a
// cancellation ends the wait at once.
func TestIdleRunParks(t *testing.T) {
	const queue = 13
	p, q := pairQueue(t, Config{Queue: queue})
	// The fewest running and in system calls before Run, over a few
	// samples: other goroutines come and go.
	before := goroutineStates()
	for i := 0; i < 5; i++ {
		time.Sleep(5 * time.Millisecond)
		s := goroutineStates()
		before[1], before[2] = min(before[1], s[1]), min(before[2], s[2])
	}
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	var during [3]uint64
	deadline := time.Now().Add(3 * time.Second)
	for {
		time.Sleep(20 * time.Millisecond)
		during = goroutineStates()
		parked := during[0] > before[0] && during[1] <= before[1] && during[2] <= before[2]
		if parked || time.Now().After(deadline) {
			if !parked {
				t.Errorf("idle Run: goroutines waiting/running/in a system call = %v, before Run %v; want one more waiting, no more running or in a system call", during, before)
			}
			break
		}
	}
	p.Send(t, 1, 16)
	if got := p.WaitCount(1, 2*time.Second); got != 1 {
		t.Errorf("after the idle wait: received %d of 1 packets", got)
	}
	took, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	timing.Check(t, took <= 500*time.Millisecond, "idle Run returned %v after cancel, want at once", took)
	t.Logf("goroutines waiting/running/in a system call: %v before Run, %v while idle; Run returned %v after cancel", before, during, took)
}

// goroutineStates returns the process's goroutines waiting, running and
// not in Go (in a system call).
func goroutineStates() [3]uint64 {
	s := []metrics.Sample{
		{Name: "/sched/goroutines/waiting:goroutines"},
		{Name: "/sched/goroutines/running:goroutines"},
		{Name: "/sched/goroutines/not-in-go:goroutines"},
	}
	metrics.Read(s)
	return [3]uint64{s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()}
}

// BenchmarkQueueLoopback is the whole live path on a real kernel: UDP sent
// over lo, queued by iptables, read, answered ACCEPT and received. allocs/op
// counts every allocation of the process per packet (sender, receiver and
// queue); via_queue_% is the share of packets the queue answered (the rest
// failed open when the sender outran it).
func BenchmarkQueueLoopback(b *testing.B) {
	const queue = 8
	p, q := pairQueue(b, Config{Queue: queue})
	stop := runQueue(b, q, func([]Packet, []Verdict, int64) {})
	payload := make([]byte, 32)
	b.ReportAllocs()
	b.ResetTimer()
	blast(b, p, payload, 5*time.Second)
	stop()
	b.ReportMetric(100*float64(q.Stats().Packets)/float64(b.N), "via_queue_%")
}

// TestMarks: a packet's mark and output interface reach the Handler, and a
// verdict's mark reaches the kernel (seen by a later rule), in batch
// verdicts mixing marked and unmarked runs.
func TestMarks(t *testing.T) {
	const queue = 4
	netnstest.UnshareQueue(t, queue)
	netnstest.Run(t, "", "iptables", "-t", "mangle", "-A", "OUTPUT", "-p", "udp", "--dport", fmt.Sprint(netnstest.TestPort), "-j", "MARK", "--set-mark", "0x5")
	netnstest.Run(t, "", "iptables", "-t", "mangle", "-A", "POSTROUTING", "-p", "udp", "--dport", fmt.Sprint(netnstest.TestPort), "-m", "mark", "--mark", "0x77")
	netnstest.Run(t, "", "iptables", "-t", "mangle", "-A", "POSTROUTING", "-p", "udp", "--dport", fmt.Sprint(netnstest.TestPort), "-m", "mark", "--mark", "0x5")
	p := netnstest.NewUDPPair(t)
	q := openQueue(t, Config{Queue: queue})
	var mu sync.Mutex
	marks := map[uint32]int{}
	var outDev, inDev uint32
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		mu.Lock()
		defer mu.Unlock()
		for i, pk := range batch {
			marks[pk.Mark]++
			outDev, inDev = pk.OutDev, pk.InDev
			if len(pk.Data) > 29 && pk.Data[29]%2 == 1 { // odd seq
				v[i] = Verdict{SetMark: true, Mark: 0x77}
			}
		}
	})
	const n = 200
	sendAll(t, p, n, 8)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if marks[5] != n {
		t.Errorf("marks seen by the handler: %v, want %d × 0x5", marks, n)
	}
	if outDev != 1 || inDev != 0 { // lo is interface 1 in a new namespace
		t.Errorf("OutDev %d InDev %d, want 1 (lo) and 0", outDev, inDev)
	}
	out, err := exec.Command("iptables", "-t", "mangle", "-L", "POSTROUTING", "-v", "-x", "-n").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -L: %v\n%s", err, out)
	}
	counts := map[string]int{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && strings.Contains(l, "mark match") {
			c, _ := strconv.Atoi(f[0])
			counts[f[len(f)-1]] = c
		}
	}
	if counts["0x77"] != n/2 || counts["0x5"] != n/2 {
		t.Errorf("POSTROUTING saw marks %v, want %d of 0x77 and of 0x5\n%s", counts, n/2, out)
	}
}

// TestIdle: with no traffic, Run calls Config.Idle at the end of each
// receive timeout (idleEvery), never sooner, with a clock that moves
// forward. It waits for the calls (no count in a wall-clock window) and
// reads their spacing from the clock Run passes; how close the spacing is
// to idleEvery is a timing figure (timing.Check).
func TestIdle(t *testing.T) {
	const queue, calls = 5, 5
	netnstest.UnshareQueue(t, queue)
	var mu sync.Mutex
	var nows []int64 // the clock of each Idle call
	q := openQueue(t, Config{Queue: queue, Idle: func(now int64) {
		mu.Lock()
		nows = append(nows, now)
		mu.Unlock()
	}})
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	// No traffic, no Wake: every call comes at the end of a receive
	// timeout. Wait for calls of them (10 s: 20 times what they take
	// unloaded), then look at their spacing on the clock Run passed.
	n := func() int { mu.Lock(); defer mu.Unlock(); return len(nows) }
	ok := testutil.WaitFor(t, 10*time.Second, func() bool { return n() >= calls })
	stop()
	mu.Lock()
	got := slices.Clone(nows)
	mu.Unlock()
	if !ok {
		t.Fatalf("Idle called %d times in 10 s with no traffic, want at least %d (every %v)", len(got), calls, idleEvery)
	}
	// Each timeout is set after the previous call read the clock: calls
	// are at least idleEvery apart (less a millisecond for the two clock
	// reads), never closer, and the clock never goes backwards.
	for i := 1; i < len(got); i++ {
		d := time.Duration(got[i] - got[i-1])
		if d < 0 {
			t.Errorf("Idle's clock went backwards: call %d at %d, call %d at %d", i-1, got[i-1], i, got[i])
		} else if d < idleEvery-time.Millisecond {
			t.Errorf("Idle calls %d and %d %v apart, want at least %v (the receive timeout): called without waiting", i-1, i, d, idleEvery)
		}
	}
	gaps := spacings(got)
	slices.Sort(gaps)
	med := gaps[len(gaps)/2]
	timing.Check(t, med <= 2*idleEvery, "Idle calls spaced %v (median), want about %v", med, idleEvery)
	t.Logf("%d Idle calls, spaced %v", len(got), spacings(got))
}

// spacings lists the gaps between successive times (ns).
func spacings(ns []int64) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(ns); i++ {
		d = append(d, time.Duration(ns[i]-ns[i-1]))
	}
	return d
}

// TestWake: Wake interrupts Run's wait for packets, which calls Idle at
// once rather than at the end of its 100 ms receive timeout (the timing
// figure: within a millisecond or so).
func TestWake(t *testing.T) {
	const queue = 6
	netnstest.UnshareQueue(t, queue)
	idle := make(chan time.Time, 16)
	q := openQueue(t, Config{Queue: queue, Idle: func(int64) { idle <- time.Now() }})
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	defer stop()
	var delays []time.Duration
	late := 0
	for range 40 {
		time.Sleep(20 * time.Millisecond) // Run is waiting in its receive
		for len(idle) > 0 {
			<-idle // timeouts' calls
		}
		t0 := time.Now()
		q.Wake()
		select {
		case t1 := <-idle:
			d := t1.Sub(t0)
			delays = append(delays, d)
			if d > 10*time.Millisecond {
				late++
			}
		case <-time.After(time.Second):
			t.Fatal("no Idle within 1 s of Wake")
		}
	}
	slices.Sort(delays)
	t.Logf("Wake to Idle: median %v, max %v", delays[len(delays)/2], delays[len(delays)-1])
	// Without Wake, Idle comes at the receive timeout, up to 100 ms
	// later: the median shows which, with one core busy too.
	if med := delays[len(delays)/2]; med > 30*time.Millisecond {
		t.Errorf("Wake to Idle: median %v; want well under the 100 ms receive timeout: Wake did not interrupt the wait", med)
	}
	// One late wake-up may be the race that Wake documents, or a timeout
	// that came first.
	timing.Check(t, late <= 2 && delays[len(delays)/2] <= 2*time.Millisecond,
		"Wake to Idle: median %v, %d of %d over 10 ms; want prompt", delays[len(delays)/2], late, len(delays))
}
