package nfq

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"
	"github.com/packetshaper/packetshaper/internal/timing"

	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Stopping with a full queue (issue 13). The kernel drops every packet
// still queued when a queue is unbound, so Run must answer them all first:
// through the Handler until the drain deadline, then with one batch
// verdict. These tests fill a 20 000-packet queue behind a slow Handler and
// stop Run (or make it fail), and count what arrives.

// fullMaxLen is the queue length of these tests: --queue-maxlen raised
// above the default 8192.
const fullMaxLen = 20000

// fullQueue is a queue filled to fullMaxLen packets, with Run started and
// its Handler's first batch waiting for open to be closed.
type fullQueue struct {
	p       *netnstest.UDPPair
	q       *Queue
	open    chan struct{}
	cancel  context.CancelFunc
	errc    chan error
	sent    int
	batches atomic.Int64
	// skew is the Handler's now less time.Now(), at its last batch.
	skew  atomic.Int64
	logMu sync.Mutex
	logs  []string
}

// fillQueue binds queue c.Queue in a new namespace (with the test options
// opts applied to the Queue before Run), runs it with a Handler taking delay per
// batch whose first batch waits for f.open, and sends fullMaxLen packets:
// it returns once the kernel's queue holds all of them.
func fillQueue(t *testing.T, c Config, delay time.Duration, opts ...testOption) *fullQueue {
	t.Helper()
	c.MaxQueueLen = fullMaxLen
	netnstest.UnshareQueue(t, c.Queue)
	f := &fullQueue{open: make(chan struct{}), errc: make(chan error, 1)}
	c.Logf = func(format string, a ...any) {
		f.logMu.Lock()
		f.logs = append(f.logs, fmt.Sprintf(format, a...))
		f.logMu.Unlock()
	}
	f.p = netnstest.NewUDPPair(t)
	// Queued packets are charged to the sender's socket until their
	// verdicts: room for fullMaxLen of them, or the sender blocks.
	if rc, err := f.p.Tx.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 64<<20); err != nil {
				t.Errorf("SO_SNDBUFFORCE: %v", err)
			}
		})
	}
	f.q = openQueue(t, c, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		f.errc <- f.q.Run(ctx, func(b []Packet, v []Verdict, now int64) {
			if f.batches.Add(1) == 1 {
				<-f.open
			}
			f.skew.Store(now - time.Now().UnixNano())
			time.Sleep(delay)
		})
	}()
	t.Cleanup(func() {
		select {
		case <-f.open:
		default:
			close(f.open)
		}
		cancel()
	})
	for ; f.sent < fullMaxLen; f.sent++ {
		f.p.Send(t, uint16(f.sent), 16)
	}
	// The kernel queues each packet in the sender's write: the queue is
	// full now, but wait for it rather than assume.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ks, err := f.q.KernelStats()
		if err == nil && ks.QueueTotal == fullMaxLen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not full: KernelStats = %+v, %v; want QueueTotal %d", ks, err, fullMaxLen)
		}
		time.Sleep(time.Millisecond)
	}
	return f
}

// wait waits for Run to return, by itself or cancelled.
func (f *fullQueue) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-f.errc:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s")
		return nil
	}
}

// stop cancels Run, lets the Handler go on and returns how long Run took
// to return and its error.
func (f *fullQueue) stop(t *testing.T) (time.Duration, error) {
	t.Helper()
	t0 := time.Now()
	f.cancel()
	close(f.open)
	err := f.wait(t)
	return time.Since(t0), err
}

// checkAllArrived checks that every packet sent arrived, once.
func (f *fullQueue) checkAllArrived(t *testing.T) {
	t.Helper()
	if got := f.p.WaitCount(int64(f.sent), 5*time.Second); got != int64(f.sent) {
		t.Errorf("received %d of %d packets", got, f.sent)
	}
	f.p.Mu.Lock()
	defer f.p.Mu.Unlock()
	for seq, c := range f.p.Got {
		if c != 1 {
			t.Errorf("packet %d arrived %d times", seq, c)
		}
	}
}

// checkAnsweredOnce checks that every packet the kernel queued was answered
// once: by the Handler (Stats.Packets) or by the stop's batch verdict
// (Stats.StopAccepted), and that nothing was left in the queue.
func (f *fullQueue) checkAnsweredOnce(t *testing.T) (Stats, KernelStats) {
	t.Helper()
	s := f.q.Stats()
	ks, err := f.q.KernelStats()
	if err != nil || ks.QueueTotal != 0 {
		t.Errorf("after Run: KernelStats = %+v, %v; want QueueTotal 0 (nothing left to the unbind)", ks, err)
	}
	if s.Lost != 0 || s.Packets+s.StopAccepted != ks.IDSequence {
		t.Errorf("Stats = %+v: Packets + StopAccepted = %d, want %d (IDSequence: every packet queued), Lost 0", s, s.Packets+s.StopAccepted, ks.IDSequence)
	}
	if _, err := readKernelStats(f.q.cfg.Queue); !errors.Is(err, ErrNotBound) {
		t.Errorf("after Run: /proc error = %v, want ErrNotBound (queue unbound)", err)
	}
	return s, ks
}

// TestCleanStop: Run stopped mid-stream, and with a full queue.
func TestCleanStop(t *testing.T) {
	t.Run("stream", testCleanStopStream)
	t.Run("full", testCleanStopFull)
}

// testCleanStopStream cancels Run in the middle of a stream that does not
// stop, with a fast Handler: Run must return within a second, and every
// packet sent must arrive (answered by Run, or, once the queue is closed,
// accepted by the kernel: fail-open, then the rule's bypass), and the
// queue must be unbound.
func testCleanStopStream(t *testing.T) {
	const queue, max = 4, 200000
	p, q := pairQueue(t, Config{Queue: queue})
	stop := runQueue(t, q, func([]Packet, []Verdict, int64) {})
	// The sender runs in this goroutine: its socket is in the namespace.
	var took time.Duration
	var runErr error
	stopped := make(chan struct{})
	sent := 0
	deadline := time.Now().Add(5 * time.Second)
send:
	for sent < max && time.Now().Before(deadline) {
		p.Send(t, uint16(sent), 16)
		sent++
		switch {
		case sent == 4000:
			go func() {
				took, runErr = stop()
				close(stopped)
			}()
		case sent > 4000 && sent%100 == 0:
			select {
			case <-stopped:
				break send // and a few more after Run returned
			default:
			}
		}
	}
	for i := 0; i < 100; i++ {
		p.Send(t, uint16(sent), 16)
		sent++
	}
	<-stopped
	if runErr != nil {
		t.Fatal(runErr)
	}
	timing.Check(t, took <= time.Second, "Run returned %v after cancel, want < 1 s", took)
	if got := p.WaitCount(int64(sent), 3*time.Second); got != int64(sent) {
		t.Errorf("received %d of %d packets", got, sent)
	}
	if _, err := readKernelStats(queue); !errors.Is(err, ErrNotBound) {
		t.Errorf("after Run: /proc error = %v, want ErrNotBound (queue unbound)", err)
	}
	s := q.Stats()
	if ks, err := q.KernelStats(); err != nil || ks.IDSequence < s.Packets {
		t.Errorf("after Run: KernelStats = %+v, %v; want the final counters (IDSequence >= %d packets answered)", ks, err, s.Packets)
	}
	if s.Packets < 1000 {
		t.Errorf("Stats.Packets = %d, want at least 1000", s.Packets)
	}
	t.Logf("Run returned in %v; %d of %d packets went through the queue; stats %+v", took, s.Packets, sent, s)
}

// testCleanStopFull: 20 000 packets queued, a Handler taking 2 ms per
// batch of 64 (0.6 s for all), cancel: Run answers through the Handler
// until the drain deadline, then accepts the rest at once, and every packet
// arrives. With fail-open, packets sent during the stop pass beside the
// queue; with FailClosed the queue keeps taking packets during the stop.
// (Before issue 13: Run unbound at the deadline and the kernel dropped the
// 7 000-odd packets left.)
func testCleanStopFull(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailClosed=%v", failClosed), func(t *testing.T) {
			f := fillQueue(t, Config{Queue: 4, FailClosed: failClosed}, 2*time.Millisecond)
			var took time.Duration
			var runErr error
			stopped := make(chan struct{})
			go func() {
				took, runErr = f.stop(t)
				close(stopped)
			}()
			if !failClosed {
				// During the stop: they find the queue full or closed,
				// and pass (fail-open).
				for i := 0; i < 200; i++ {
					f.p.Send(t, uint16(f.sent), 16)
					f.sent++
				}
			}
			<-stopped
			if runErr != nil {
				t.Fatal(runErr)
			}
			// After Run: the rule's bypass.
			for i := 0; i < 100; i++ {
				f.p.Send(t, uint16(f.sent), 16)
				f.sent++
			}
			if took < stopDrainTimeout {
				t.Errorf("Run returned %v after cancel, want at least %v (the drain deadline)", took, stopDrainTimeout)
			}
			timing.Check(t, took <= 1500*time.Millisecond, "Run returned %v after cancel, want from %v (the drain deadline) to 1.5 s", took, stopDrainTimeout)
			f.checkAllArrived(t)
			s, ks := f.checkAnsweredOnce(t)
			if s.StopAccepted == 0 {
				t.Errorf("Stats.StopAccepted = 0: the drain did not reach its deadline")
			}
			if ks.QueueDropped != 0 {
				t.Errorf("KernelStats.QueueDropped = %d, want 0", ks.QueueDropped)
			}
			t.Logf("Run returned in %v; queue full at %d; %d answered by the Handler, %d by the final verdict; %d of %d sent arrived",
				took, fullMaxLen, s.Packets, s.StopAccepted, f.p.N.Load(), f.sent)
		})
	}
}

// TestCleanStopClockStep: the same stop with the wall clock stepped an
// hour since Run started (injected: the engine's clock, which Handlers
// see, is then an hour off time.Now()). The drain deadline is on the
// engine's clock, which the step does not move: the drain still lasts
// stopDrainTimeout. Batches of 8 make the whole drain 5 s long, so a
// deadline that a step forward pushed away shows too. (Before issue 13 the
// deadline came from the wall clock: after a step back Run unbound at once
// and 64 of 20 000 packets arrived.)
func TestCleanStopClockStep(t *testing.T) {
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(fmt.Sprintf("step=%v", step), func(t *testing.T) {
			f := fillQueue(t, Config{Queue: 4, BatchSize: 8}, 2*time.Millisecond,
				// A step of the wall clock by step after Run's start: the
				// engine's clock runs -step off time.Now().
				withWallClock(func() int64 { return time.Now().UnixNano() - int64(step) }))
			took, err := f.stop(t)
			if err != nil {
				t.Fatal(err)
			}
			if skew := time.Duration(f.skew.Load()); (skew + step).Abs() > time.Second {
				t.Fatalf("Handler's now - time.Now() = %v, want about %v (the clock hook not used?)", skew, -step)
			}
			// A deadline on the stepped clock would end the drain at once
			// (or never: an hour): the bounds show it with a loaded
			// machine's margin; 2 s is the timing figure.
			if took < stopDrainTimeout || took > 10*time.Second {
				t.Errorf("Run returned %v after cancel, want from %v (the drain deadline) to 10 s", took, stopDrainTimeout)
			}
			timing.Check(t, took <= 2*time.Second, "Run returned %v after cancel, want from %v (the drain deadline) to 2 s", took, stopDrainTimeout)
			f.checkAllArrived(t)
			s, _ := f.checkAnsweredOnce(t)
			t.Logf("Run returned in %v; %d answered by the Handler, %d by the final verdict", took, s.Packets, s.StopAccepted)
		})
	}
}

// TestStopAfterWriteFailure: with 20 000 packets queued, the Handler's
// verdict writes start failing after failAfter batches (injected), and Run
// gives up with an error. Before the unbind it accepts everything still
// queued with one batch verdict, so every packet arrives; if that write
// fails too, Run's error and the log say how many packets were left to the
// kernel, and exactly those are lost.
func TestStopAfterWriteFailure(t *testing.T) {
	const failAfter = 50
	for _, finalFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("finalFails=%v", finalFails), func(t *testing.T) {
			var f *fullQueue
			var failed atomic.Int64
			f = fillQueue(t, Config{Queue: 4}, 0, withWriteHook(func(b []byte) error {
				typ := le.Uint16(b[4:])
				if typ != nfqnlMsgVerdict && typ != nfqnlMsgVerdictBatch || f.batches.Load() <= failAfter {
					return nil
				}
				if finalFails || failed.Load() == 0 {
					failed.Add(1)
					return unix.EIO
				}
				return nil
			}))
			close(f.open)
			err := f.wait(t)
			if err == nil || !strings.Contains(err.Error(), "sending verdicts") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Run: %v; want a one-line error about sending verdicts", err)
			}
			s := f.q.Stats()
			if s.Packets == 0 || s.Packets >= fullMaxLen/2 {
				t.Errorf("Stats.Packets = %d, want the %d batches' before the failure", s.Packets, failAfter)
			}
			if !finalFails {
				if strings.Contains(err.Error(), "left") {
					t.Errorf("Run: %v; want no packets left", err)
				}
				f.checkAllArrived(t)
				f.checkAnsweredOnce(t)
				t.Logf("Run: %v; %d answered by the Handler, %d by the final verdict", err, s.Packets, s.StopAccepted)
				return
			}
			m := regexp.MustCompile(`(\d+) packets left to the kernel`).FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("Run: %v; want the number of packets left to the kernel", err)
			}
			left, _ := strconv.Atoi(m[1])
			if left != fullMaxLen-int(s.Packets) {
				t.Errorf("Run: %d packets left, want %d (queued %d, answered %d)", left, fullMaxLen-int(s.Packets), fullMaxLen, s.Packets)
			}
			f.logMu.Lock()
			logged := strings.Join(f.logs, "\n")
			f.logMu.Unlock()
			if !strings.Contains(logged, m[0]) {
				t.Errorf("log %q does not say %q", logged, m[0])
			}
			// What the Handler answered arrives, the rest was dropped
			// by the unbind (synchronously: none can come later).
			want := int64(f.sent - left)
			if got := f.p.WaitCount(want, 5*time.Second); got != want {
				t.Errorf("received %d, want %d (sent %d, %d left)", got, want, f.sent, left)
			}
			t.Logf("Run: %v", err)
		})
	}
}
