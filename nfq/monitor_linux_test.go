package nfq

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pacedSend sends n datagrams numbered from first at rate per second,
// evenly, from the calling goroutine (whose thread is in the namespace).
func pacedSend(t testing.TB, p *udpPair, first, n int, rate float64) {
	t.Helper()
	start := time.Now()
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(float64(i) / rate * 1e9))
		if d := time.Until(due); d > time.Millisecond {
			time.Sleep(d)
		}
		p.send(t, uint16(first+i), 16)
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
		n       = 10000  // 2 s
		blockAt = 2500   // after 0.5 s
		block   = time.Second
	)
	newNetns(t, queue)
	p := newUDPPair(t)
	q := openQueue(t, Config{Queue: queue, MaxQueueLen: maxLen})
	var logExact, logEst syncBuffer
	mExact, err := NewMonitor([]*Queue{q}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&logExact, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mEst, err := NewMonitor([]*Queue{q}, MonitorConfig{EstimateOnly: true, Logger: slog.New(slog.NewTextHandler(&logEst, nil))})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, mExact)
	startMonitor(t, mEst)
	var blocked atomic.Bool
	stop := runQueue(t, q, func(b []Packet, v []Verdict, now int64) {
		for i := range b {
			if seq, ok := seqOf(&b[i]); ok && seq >= blockAt && !blocked.Swap(true) {
				time.Sleep(block)
			}
		}
	})
	pacedSend(t, p, 0, n, rate)
	got := p.settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond) // a sample with the queue drained
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	s := q.Stats()
	if got != n {
		t.Errorf("received %d of %d", got, n)
	}
	truth := uint64(got) - s.Packets - s.Lost
	if truth < 3000 {
		t.Fatalf("only %d packets passed without a verdict; the test needs the queue to overflow", truth)
	}
	ex, es := mExact.Stats(queue), mEst.Stats(queue)
	t.Logf("truth %d (received %d, answered %d, lost %d); exact %+v; estimate %+v (%+.1f%%)",
		truth, got, s.Packets, s.Lost, ex, es, 100*(float64(es.Passed)/float64(truth)-1))
	if ex.Passed != truth || !ex.Exact || ex.Active {
		t.Errorf("exact monitor: %+v, want Passed %d, Exact, not Active", ex, truth)
	}
	if ex.Secs < 0.8*block.Seconds() || ex.Secs > 1.3*block.Seconds() {
		t.Errorf("exact monitor: Secs = %.3f, want about %v", ex.Secs, block.Seconds())
	}
	if tot := mExact.Total(); tot != ex {
		t.Errorf("Total() = %+v, want %+v (one queue)", tot, ex)
	}
	if es.Exact || math.Abs(float64(es.Passed)/float64(truth)-1) > 0.10 {
		t.Errorf("estimating monitor: %+v, want not Exact and Passed within 10%% of %d", es, truth)
	}
	for name, l := range map[string]string{"exact": logExact.String(), "estimate": logEst.String()} {
		t.Logf("%s log:\n%s", name, l)
		if c := strings.Count(l, "full: packets pass without a verdict (fail-open)"); c != 1 {
			t.Errorf("%s log: %d start lines, want 1", name, c)
		}
		if c := strings.Count(l, "fail-open ended"); c != 1 {
			t.Errorf("%s log: %d end lines, want 1", name, c)
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
	const (
		queue  = 6
		maxLen = 64
		rate   = 5000.0
		pause  = time.Second
	)
	if childMode() == "stall" {
		stallChild(t, queue, maxLen)
		return
	}
	newNetns(t, queue)
	p := newUDPPair(t)
	child := startChild(t, "TestMonitorStall", "stall")
	child.expect(t, "READY")
	pacedSend(t, p, 0, int(rate/2), rate) // 0.5 s
	child.signal(t, syscall.SIGSTOP)
	pacedSend(t, p, int(rate/2), int(rate*pause.Seconds()), rate)
	child.signal(t, syscall.SIGCONT)
	pacedSend(t, p, int(rate/2+rate*pause.Seconds()), int(rate/2), rate)
	got := p.settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond)
	child.send(t, "STOP")
	res := child.expect(t, "RESULT")
	out := child.wait(t)
	var answered, lost, exPassed, esPassed uint64
	var exExact, esExact bool
	var exSecs, esSecs float64
	if _, err := fmt.Sscanf(res, "RESULT %d %d %d %t %g %d %t %g", &answered, &lost, &exPassed, &exExact, &exSecs, &esPassed, &esExact, &esSecs); err != nil {
		t.Fatalf("child result %q: %v\n%s", res, err, out)
	}
	sent := int64(2*int(rate/2) + int(rate*pause.Seconds()))
	if got != sent {
		t.Errorf("received %d of %d", got, sent)
	}
	truth := uint64(got) - answered - lost
	t.Logf("truth %d (received %d, answered %d, lost %d); exact %d (%v, %.3f s); estimate %d (%v, %.3f s, %+.1f%%)\n%s",
		truth, got, answered, lost, exPassed, exExact, exSecs, esPassed, esExact, esSecs, 100*(float64(esPassed)/float64(truth)-1), out)
	if truth < 3000 {
		t.Fatalf("only %d packets passed without a verdict; the test needs the queue to overflow", truth)
	}
	if exPassed != truth || !exExact {
		t.Errorf("exact monitor: Passed %d (exact %v), want %d", exPassed, exExact, truth)
	}
	if esExact || math.Abs(float64(esPassed)/float64(truth)-1) > 0.10 {
		t.Errorf("estimating monitor: Passed %d (exact %v), want within 10%% of %d", esPassed, esExact, truth)
	}
	for _, s := range []float64{exSecs, esSecs} {
		if s < 0.8*pause.Seconds() || s > 1.3*pause.Seconds() {
			t.Errorf("Secs = %.3f, want about %v", s, pause.Seconds())
		}
	}
	if c := strings.Count(out, "while packetshaper was stalled"); c != 2 {
		t.Errorf("%d log lines about the stall, want 2 (one per monitor)", c)
	}
}

// stallChild serves the queue with an exact and an estimating monitor
// until it reads STOP, then prints RESULT answered lost exactPassed
// exactExact exactSecs estPassed estExact estSecs.
func stallChild(t *testing.T, queue uint16, maxLen uint32) {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	q := openQueue(t, Config{Queue: queue, MaxQueueLen: maxLen})
	mEx, err := NewMonitor([]*Queue{q}, MonitorConfig{Logger: log.With("monitor", "exact")})
	if err != nil {
		t.Fatal(err)
	}
	mEs, err := NewMonitor([]*Queue{q}, MonitorConfig{EstimateOnly: true, Logger: log.With("monitor", "estimate")})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, mEx)
	startMonitor(t, mEs)
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
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
	out   syncBuffer
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
		n      = 10000
		flows  = 8
	)
	newNetns(t, q0)
	run(t, "", "iptables", "-I", "OUTPUT", "-p", "udp", "--dport", fmt.Sprint(testPort),
		"-j", "NFQUEUE", "--queue-balance", fmt.Sprintf("%d:%d", q0, q1), "--queue-bypass")
	p := newUDPPair(t)
	var txs []*net.UDPConn
	for i := 0; i < flows; i++ {
		// The balance hash of IPv4 covers the addresses, not the ports.
		src := &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(1+i))}
		tx, err := net.DialUDP("udp4", src, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: testPort})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		txs = append(txs, tx)
	}
	qa := openQueue(t, Config{Queue: q0, MaxQueueLen: maxLen})
	qb := openQueue(t, Config{Queue: q1, MaxQueueLen: maxLen})
	var log syncBuffer
	m, err := NewMonitor([]*Queue{qa, qb}, MonitorConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mEst, err := NewMonitor([]*Queue{qa, qb}, MonitorConfig{EstimateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	startMonitor(t, m)
	startMonitor(t, mEst)
	var stops []func() (time.Duration, error)
	for _, q := range []*Queue{qa, qb} {
		var blocked atomic.Bool
		stops = append(stops, runQueue(t, q, func(b []Packet, v []Verdict, now int64) {
			for i := range b {
				if seq, ok := seqOf(&b[i]); ok && seq >= n/4 && !blocked.Swap(true) {
					time.Sleep(time.Second)
				}
			}
		}))
	}
	start := time.Now()
	buf := make([]byte, 16)
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(float64(i) / rate * 1e9))); d > time.Millisecond {
			time.Sleep(d)
		}
		buf[0], buf[1] = byte(i>>8), byte(i)
		if _, err := txs[i%flows].Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	got := p.settle(2 * time.Second)
	time.Sleep(300 * time.Millisecond)
	for _, stop := range stops {
		if _, err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := qa.Stats(), qb.Stats()
	truth := uint64(got) - sa.Packets - sb.Packets - sa.Lost - sb.Lost
	tot, es := m.Total(), mEst.Total()
	a, b := m.Stats(q0), m.Stats(q1)
	t.Logf("truth %d (received %d, answered %d + %d); total %+v = %+v + %+v; estimate %+v\n%s", truth, got, sa.Packets, sb.Packets, tot, a, b, es, log.String())
	if sa.Packets == 0 || sb.Packets == 0 {
		t.Fatalf("a queue got no packets: %d, %d (flows not balanced)", sa.Packets, sb.Packets)
	}
	if tot.Passed != truth || !tot.Exact || a.Passed+b.Passed != truth || !a.Exact || !b.Exact {
		t.Errorf("exact monitor: total %+v (%+v + %+v), want Passed %d, Exact", tot, a, b, truth)
	}
	if tot.Secs < 0.8 || tot.Secs > 1.3 {
		t.Errorf("Total().Secs = %.3f, want about 1", tot.Secs)
	}
	if es.Exact || math.Abs(float64(es.Passed)/float64(truth)-1) > 0.10 {
		t.Errorf("estimating monitor: %+v, want not Exact and Passed within 10%% of %d", es, truth)
	}
	if !strings.Contains(log.String(), "queue 5-6: packets passed by fail-open are counted exactly") {
		t.Error("the log does not say that queues 5-6 are counted together")
	}
}
