package failopen

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"
	"github.com/packetshaper/packetshaper/internal/testutil"

	"github.com/packetshaper/packetshaper/nfq"

	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pacer sends datagrams at a steady rate and remembers when it sent them.
type pacer struct {
	times []time.Time
}

// send sends datagrams numbered from first at rate per second, evenly, for
// n/rate seconds, from the calling goroutine (whose thread is in the
// namespace), through tx (p.Tx if nil), and returns how many it sent.
// Falling behind, it skips datagrams rather than catch up with a burst.
func (s *pacer) send(t testing.TB, p *netnstest.UDPPair, txs []*net.UDPConn, first, n int, rate float64) int {
	t.Helper()
	if txs == nil {
		txs = []*net.UDPConn{p.Tx}
	}
	buf := make([]byte, 16)
	start := time.Now()
	sent := 0
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(float64(i) / rate * 1e9))
		d := time.Until(due)
		if d > time.Millisecond {
			time.Sleep(d)
		} else if d < -2*time.Millisecond {
			continue
		}
		seq := first + i
		buf[0], buf[1] = byte(seq>>8), byte(seq)
		if _, err := txs[i%len(txs)].Write(buf); err != nil {
			t.Fatalf("send %d: %v", seq, err)
		}
		s.times = append(s.times, time.Now())
		sent++
	}
	return sent
}

// rate is the send rate in [from, to), per second.
func (s *pacer) rate(from, to time.Time) float64 {
	n := 0
	for _, x := range s.times {
		if !x.Before(from) && x.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// steady reports whether the sender kept its rate from half a second
// before from (the rate the estimates learn) until to: within 5% over
// [from, to), and within 25% in every 100 ms; and that rate. An estimate can
// be checked only then: on a loaded machine the sender does not keep its
// rate, and the estimate, which assumes it, is off by what the rate changed.
func (s *pacer) steady(from, to time.Time) (bool, float64) {
	base := s.rate(from.Add(-500*time.Millisecond), from)
	if base == 0 || math.Abs(s.rate(from, to)/base-1) > 0.05 {
		return false, base
	}
	for t := from.Add(-500 * time.Millisecond); t.Add(100 * time.Millisecond).Before(to); t = t.Add(100 * time.Millisecond) {
		if r := s.rate(t, t.Add(100*time.Millisecond)); math.Abs(r/base-1) > 0.25 {
			return false, base
		}
	}
	return true, base
}

// checkSecs checks the time a queue of maxLen was found full while its
// reader did not run in [from, to): more than 0, and, if the sender was
// steady, the time from the maxLen-th packet sent in it to its end, give or
// take 0.25 s (the samples are 0.1 s apart; the reader needs a moment to
// drain the queue after it).
func (s *pacer) checkSecs(t *testing.T, name string, secs float64, maxLen int, from, to time.Time) {
	t.Helper()
	if secs <= 0 {
		t.Errorf("%s: Secs = %v, want > 0", name, secs)
		return
	}
	fill := to
	n := 0
	for _, x := range s.times {
		if !x.Before(from) && x.Before(to) {
			if n++; n == maxLen {
				fill = x
				break
			}
		}
	}
	want := to.Sub(fill).Seconds()
	if ok, rate := s.steady(from, to); !ok {
		t.Logf("%s: the sender did not keep its rate (%.0f/s before): Secs %.3f (full for about %.3f s) not checked", name, rate, secs, want)
		return
	}
	if math.Abs(secs-want) > 0.25 {
		t.Errorf("%s: Secs = %.3f, want %.3f ± 0.25", name, secs, want)
	}
}

// checkEstimate checks that an estimate of the packets passed by fail-open
// is within 10% of the truth, if the sender was steady.
func (s *pacer) checkEstimate(t *testing.T, name string, est, truth uint64, from, to time.Time) {
	t.Helper()
	ok, rate := s.steady(from, to)
	if !ok {
		t.Logf("%s: the sender did not keep its rate (%.0f/s before): estimate %d for %d not checked", name, rate, est, truth)
		return
	}
	if math.Abs(float64(est)-float64(truth)) > 0.10*float64(truth) {
		t.Errorf("%s: estimate %d, want within 10%% of %d (sender steady at %.0f/s)", name, est, truth, rate)
	}
}

// startMonitor starts m.Run until the test ends.
func startMonitor(t testing.TB, m *Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
}

// TestMonitorFailOpen: a steady stream, and a Handler that blocks for a
// second: the queue fills and the kernel passes the rest without a verdict.
// One monitor counts them from the rule's counter (exact), one estimates
// them; both log the start and the end. The truth is what arrived minus
// what the Handler saw.
func TestMonitorFailOpen(t *testing.T) {
	const (
		queue   = 5
		maxLen  = 64
		rate    = 5000.0 // packets/s
		n       = 12000  // 2.4 s
		blockAt = 4000   // after 0.8 s
		block   = time.Second
	)
	netnstest.UnshareQueue(t, queue)
	p := netnstest.NewUDPPair(t)
	q := openQueue(t, nfq.Config{Queue: queue, MaxQueueLen: maxLen})
	var logExact, logEst testutil.SyncBuffer
	mExact, err := NewMonitor([]*nfq.Queue{q}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&logExact, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mEst, err := NewMonitor([]*nfq.Queue{q}, MonitorConfig{EstimateOnly: true, Logger: slog.New(slog.NewTextHandler(&logEst, nil))})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, mExact)
	startMonitor(t, mEst)
	var blocked atomic.Bool
	var blockFrom, blockTo time.Time // written before blocked is set, read after Run returned
	stop := runQueue(t, q, func(b []nfq.Packet, v []nfq.Verdict, now int64) {
		for i := range b {
			if seq, ok := seqOf(&b[i]); ok && seq >= blockAt && !blocked.Load() {
				blockFrom = time.Now()
				time.Sleep(block)
				blockTo = time.Now()
				blocked.Store(true)
			}
		}
	})
	var pc pacer
	sent := pc.send(t, p, nil, 0, n, rate)
	p.Settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond) // a sample with the queue drained
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	s := q.Stats()
	got := p.WaitCount(int64(sent), 2*time.Second)
	if got != int64(sent) {
		t.Errorf("received %d of %d", got, sent)
	}
	truth := uint64(got) - s.Packets - s.Lost
	if truth < 100 || !blocked.Load() {
		t.Fatalf("only %d packets passed without a verdict; the test needs the queue to overflow", truth)
	}
	ex, es := mExact.Stats(queue), mEst.Stats(queue)
	t.Logf("truth %d (received %d, answered %d, lost %d); exact %+v; estimate %+v (%+.1f%%; sent %.0f/s before, %.0f/s during)",
		truth, got, s.Packets, s.Lost, ex, es, 100*(float64(es.Passed)/float64(truth)-1),
		pc.rate(blockFrom.Add(-500*time.Millisecond), blockFrom), pc.rate(blockFrom, blockTo))
	if ex.Passed != truth || !ex.Exact || ex.Active {
		t.Errorf("exact monitor: %+v, want Passed %d, Exact, not Active", ex, truth)
	}
	pc.checkSecs(t, "exact monitor", ex.Secs, maxLen, blockFrom, blockTo)
	if tot := mExact.Total(); tot != ex {
		t.Errorf("Total() = %+v, want %+v (one queue)", tot, ex)
	}
	if es.Exact {
		t.Errorf("estimating monitor: %+v, want not Exact", es)
	}
	pc.checkEstimate(t, "estimating monitor", es.Passed, truth, blockFrom, blockTo.Add(300*time.Millisecond))
	for name, l := range map[string]string{"exact": logExact.String(), "estimate": logEst.String()} {
		t.Logf("%s log:\n%s", name, l)
		// On a loaded machine the reader may fall behind again after
		// the block: more episodes, each counted.
		if c := strings.Count(l, "full: packets pass without a verdict (fail-open)"); c < 1 {
			t.Errorf("%s log: no start line", name)
		}
		if c := strings.Count(l, "fail-open ended"); c < 1 {
			t.Errorf("%s log: no end line", name)
		}
	}
	if !strings.Contains(logExact.String(), "exact, from the rule counters") || !strings.Contains(logEst.String(), "estimated from the arrival rate") {
		t.Error("the logs do not say how the counts were made")
	}
}

// TestMonitorStall stops the whole process serving the queue (SIGSTOP) for
// a second in the middle of a steady stream: the reader and the monitors
// stop together. After SIGCONT the monitors see the gap: the exact one
// counts every packet that passed meanwhile, the estimating one accounts
// the gap at the arrival rate. The process is a child (this test binary,
// mode "stall") in this test's namespace.
func TestMonitorStall(t *testing.T) {
	testutil.NeedExclusive(t, "its warnings and counts are timed against a 1 s stall of the queue")
	const (
		queue  = 6
		maxLen = 64
		rate   = 5000.0
		pause  = time.Second
	)
	if netnstest.ChildMode() == "stall" {
		stallChild(t, queue, maxLen)
		return
	}
	netnstest.UnshareQueue(t, queue)
	p := netnstest.NewUDPPair(t)
	child := startChild(t, "TestMonitorStall", "stall")
	child.expect(t, "READY")
	var pc pacer
	before := int(0.8 * rate) // 0.8 s, for the monitors to learn the rate
	sent := int64(pc.send(t, p, nil, 0, before, rate))
	child.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	sent += int64(pc.send(t, p, nil, before, int(rate*pause.Seconds()), rate))
	child.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	sent += int64(pc.send(t, p, nil, before+int(rate*pause.Seconds()), int(rate/2), rate))
	p.Settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond)
	child.send(t, "STOP")
	res := child.expect(t, "RESULT")
	out := child.wait(t)
	got := p.WaitCount(sent, 2*time.Second)
	var answered, lost, exPassed, esPassed uint64
	var exExact, esExact bool
	var exSecs, esSecs float64
	if _, err := fmt.Sscanf(res, "RESULT %d %d %d %t %g %d %t %g", &answered, &lost, &exPassed, &exExact, &exSecs, &esPassed, &esExact, &esSecs); err != nil {
		t.Fatalf("child result %q: %v\n%s", res, err, out)
	}
	if got != sent {
		t.Errorf("received %d of %d", got, sent)
	}
	truth := uint64(got) - answered - lost
	t.Logf("truth %d (received %d, answered %d, lost %d); exact %d (%v, %.3f s); estimate %d (%v, %.3f s, %+.1f%%)\n%s",
		truth, got, answered, lost, exPassed, exExact, exSecs, esPassed, esExact, esSecs, 100*(float64(esPassed)/float64(truth)-1), out)
	if truth < 100 {
		t.Fatalf("only %d packets passed without a verdict; the test needs the queue to overflow", truth)
	}
	if exPassed != truth || !exExact {
		t.Errorf("exact monitor: Passed %d (exact %v), want %d", exPassed, exExact, truth)
	}
	if esExact {
		t.Error("estimating monitor: Exact")
	}
	pc.checkEstimate(t, "estimating monitor", esPassed, truth, stopped, resumed.Add(300*time.Millisecond))
	pc.checkSecs(t, "exact monitor", exSecs, maxLen, stopped, resumed)
	pc.checkSecs(t, "estimating monitor", esSecs, maxLen, stopped, resumed)
	// Per monitor, a warning that the queue filled during the stall (seen
	// on resuming) and one that fail-open ended, with the count.
	if c := strings.Count(out, "filled while packetshaper was stalled"); c != 2 {
		t.Errorf("%d start warnings about the stall, want 2 (one per monitor)", c)
	}
	if c := strings.Count(out, "fail-open ended:"); c != 2 {
		t.Errorf("%d end warnings about the stall, want 2 (one per monitor)", c)
	}
}

// stallChild serves the queue with an exact and an estimating monitor
// until it reads STOP, then prints RESULT answered lost exactPassed
// exactExact exactSecs estPassed estExact estSecs.
func stallChild(t *testing.T, queue uint16, maxLen uint32) {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	q := openQueue(t, nfq.Config{Queue: queue, MaxQueueLen: maxLen})
	mEx, err := NewMonitor([]*nfq.Queue{q}, MonitorConfig{Logger: log.With("monitor", "exact")})
	if err != nil {
		t.Fatal(err)
	}
	mEs, err := NewMonitor([]*nfq.Queue{q}, MonitorConfig{EstimateOnly: true, Logger: log.With("monitor", "estimate")})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, mEx)
	startMonitor(t, mEs)
	stop := runQueue(t, q, func([]nfq.Packet, []nfq.Verdict, int64) {})
	fmt.Println("READY")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "STOP" {
	}
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	s, ex, es := q.Stats(), mEx.Stats(queue), mEs.Stats(queue)
	fmt.Printf("RESULT %d %d %d %t %g %d %t %g\n", s.Packets, s.Lost, ex.Passed, ex.Exact, ex.Secs, es.Passed, es.Exact, es.Secs)
}

// child is a child process of this test binary (see runChild) that the
// test talks to line by line.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	out   testutil.SyncBuffer
}

// startChild starts test name in a child process, as root, in the calling
// thread's network namespace, with NFQ_TEST_CHILD=mode.
func startChild(t *testing.T, name, mode string) *child {
	t.Helper()
	c := &child{lines: make(chan string, 100)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	c.cmd.Env = append(os.Environ(), "NFQ_TEST_CHILD="+mode)
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.out.Write([]byte(sc.Text() + "\n"))
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
	return c
}

// expect waits (up to 10 s) for a line starting with prefix and returns it.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before %q:\n%s", prefix, c.out.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the child in 10 s:\n%s", prefix, c.out.String())
		}
	}
}

func (c *child) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *child) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the child to exit and returns its output.
func (c *child) wait(t *testing.T) string {
	t.Helper()
	for range c.lines {
	}
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("child: %v\n%s", err, c.out.String())
	}
	return c.out.String()
}

// TestMonitorBalance: one rule balances flows over two queues, both
// served, both blocked for a second. The exact count is exact for the sum
// over the two queues; so is each queue's Exact (the split between them
// follows the estimates).
func TestMonitorBalance(t *testing.T) {
	const (
		q0, q1 = 5, 6
		maxLen = 64
		rate   = 5000.0
		n      = 12000
		flows  = 8
	)
	netnstest.UnshareQueue(t, q0)
	netnstest.Run(t, "", "iptables", "-I", "OUTPUT", "-p", "udp", "--dport", fmt.Sprint(netnstest.TestPort),
		"-j", "NFQUEUE", "--queue-balance", fmt.Sprintf("%d:%d", q0, q1), "--queue-bypass")
	p := netnstest.NewUDPPair(t)
	var txs []*net.UDPConn
	for i := 0; i < flows; i++ {
		// The balance hash of IPv4 covers the addresses, not the ports.
		src := &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(1+i))}
		tx, err := net.DialUDP("udp4", src, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: netnstest.TestPort})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		txs = append(txs, tx)
	}
	qa := openQueue(t, nfq.Config{Queue: q0, MaxQueueLen: maxLen})
	qb := openQueue(t, nfq.Config{Queue: q1, MaxQueueLen: maxLen})
	var log testutil.SyncBuffer
	m, err := NewMonitor([]*nfq.Queue{qa, qb}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mEst, err := NewMonitor([]*nfq.Queue{qa, qb}, MonitorConfig{EstimateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, m)
	startMonitor(t, mEst)
	var stops []func() (time.Duration, error)
	var blockFrom, blockTo [2]time.Time
	var blocked [2]atomic.Bool
	for j, q := range []*nfq.Queue{qa, qb} {
		stops = append(stops, runQueue(t, q, func(b []nfq.Packet, v []nfq.Verdict, now int64) {
			for i := range b {
				if seq, ok := seqOf(&b[i]); ok && seq >= n/3 && !blocked[j].Load() {
					blockFrom[j] = time.Now()
					time.Sleep(time.Second)
					blockTo[j] = time.Now()
					blocked[j].Store(true)
				}
			}
		}))
	}
	var pc pacer
	sent := pc.send(t, p, txs, 0, n, rate)
	p.Settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond)
	for _, stop := range stops {
		if _, err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	got := p.WaitCount(int64(sent), 2*time.Second)
	if got != int64(sent) {
		t.Errorf("received %d of %d", got, sent)
	}
	sa, sb := qa.Stats(), qb.Stats()
	truth := uint64(got) - sa.Packets - sb.Packets - sa.Lost - sb.Lost
	tot, es := m.Total(), mEst.Total()
	a, b := m.Stats(q0), m.Stats(q1)
	if !blocked[0].Load() || !blocked[1].Load() {
		t.Fatal("a handler never blocked")
	}
	t.Logf("truth %d (received %d, answered %d + %d); total %+v = %+v + %+v; estimate %+v\n%s", truth, got, sa.Packets, sb.Packets, tot, a, b, es, log.String())
	if sa.Packets == 0 || sb.Packets == 0 {
		t.Fatalf("a queue got no packets: %d, %d (flows not balanced)", sa.Packets, sb.Packets)
	}
	if tot.Passed != truth || !tot.Exact || a.Passed+b.Passed != truth || !a.Exact || !b.Exact {
		t.Errorf("exact monitor: total %+v (%+v + %+v), want Passed %d, Exact", tot, a, b, truth)
	}
	pc.checkSecs(t, "Total()", tot.Secs, 2*maxLen, blockFrom[0], blockTo[0])
	if es.Exact {
		t.Errorf("estimating monitor: %+v, want not Exact", es)
	}
	from, to := blockFrom[0], blockTo[0]
	if blockFrom[1].Before(from) {
		from = blockFrom[1]
	}
	if blockTo[1].After(to) {
		to = blockTo[1]
	}
	pc.checkEstimate(t, "estimating monitor", es.Passed, truth, from, to.Add(300*time.Millisecond))
	if !strings.Contains(log.String(), "queue 5-6: packets passed by fail-open are counted exactly") {
		t.Error("the log does not say that queues 5-6 are counted together")
	}
}

// TestMonitorBurst: a burst into a bound queue whose reader has not
// started: maxLen packets get in, the rest pass (fail-open) or are dropped
// (fail-closed, counted by the kernel as queue_dropped, not as passed).
func TestMonitorBurst(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailClosed=%v", failClosed), func(t *testing.T) {
			const queue, n, maxLen = 2, 100, 16
			netnstest.UnshareQueue(t, queue)
			p := netnstest.NewUDPPair(t)
			q := openQueue(t, nfq.Config{Queue: queue, MaxQueueLen: maxLen, FailClosed: failClosed})
			var log testutil.SyncBuffer
			m, err := NewMonitor([]*nfq.Queue{q}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			startMonitor(t, m)
			for i := 0; i < n; i++ {
				p.Send(t, uint16(i), 16)
			}
			p.Settle(time.Second)
			// The queue stays full until the reader starts: let the
			// monitor sample it full (on a loaded machine its ticks
			// can come late) before starting the reader.
			for deadline := time.Now().Add(5 * time.Second); !m.Stats(queue).Active; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the monitor never saw the queue full: %+v\n%s", m.Stats(queue), log.String())
				}
			}
			time.Sleep(2 * DefaultMonitorPeriod)
			stop := runQueue(t, q, func([]nfq.Packet, []nfq.Verdict, int64) {})
			p.WaitCount(n, time.Second)
			time.Sleep(200 * time.Millisecond)
			if _, err := stop(); err != nil {
				t.Fatal(err)
			}
			want := FailOpenStats{Passed: n - maxLen, Exact: true}
			if failClosed {
				want.Passed = 0
			}
			got := m.Stats(queue)
			ks, _ := q.KernelStats()
			t.Logf("%+v; kernel %+v\n%s", got, ks, log.String())
			if got.Passed != want.Passed || got.Exact != want.Exact || got.Active || got.Secs <= 0 {
				t.Errorf("Stats = %+v, want Passed %d, Exact, Secs > 0", got, want.Passed)
			}
		})
	}
}
