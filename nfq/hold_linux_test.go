package nfq

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"

	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// TestHoldRealKernel: against the real kernel, packets held (Verdict.At)
// get their verdict at their time and not before, while the packets around
// them, answered at once in the same batches (one by one, since packets are
// held), go through or are dropped as told; the timer wakes Run for a
// release with no traffic at all.
func TestHoldRealKernel(t *testing.T) {
	const queue, n = 5, 300
	const hold = 150 * time.Millisecond
	p, q := pairQueue(t, Config{Queue: queue, BatchSize: 16})
	var mu sync.Mutex
	sched := map[uint16]int64{} // seq → At, engine clock
	var base atomic.Int64       // engine clock − wall clock
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		base.Store(now - time.Now().UnixNano())
		for i := range batch {
			seq, _ := seqOf(&batch[i])
			switch seq % 3 {
			case 0:
				v[i].At = now + int64(hold) + int64(seq%7)*int64(time.Millisecond)
				if seq%2 == 0 {
					v[i].SetMark, v[i].Mark = true, 0x9
				}
				mu.Lock()
				sched[seq] = v[i].At
				mu.Unlock()
			case 2:
				v[i].Action = Drop
			}
		}
	})
	sent := map[uint16]int64{}
	for i := 0; i < n; i++ {
		sent[uint16(i)] = time.Now().UnixNano()
		p.Send(t, uint16(i), 32)
		if i%50 == 49 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	p.WaitCount(2*n/3, 3*time.Second)
	// Then one packet alone: its release is the only event.
	time.Sleep(300 * time.Millisecond)
	sent[n] = time.Now().UnixNano()
	p.Send(t, n, 32)
	p.WaitCount(2*n/3+1, 3*time.Second)
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	p.Mu.Lock()
	defer p.Mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	off := base.Load()
	var lateMax int64
	for i := uint16(0); i <= n; i++ {
		c := p.Got[i]
		switch i % 3 {
		case 0:
			at, ok := sched[i]
			if c != 1 || !ok {
				t.Errorf("held packet %d arrived %d times (scheduled: %v)", i, c, ok)
				continue
			}
			// Arrival on the engine's clock, against its time.
			if early := at - (p.At[i] + off); early > int64(releaseEarly)+int64(time.Millisecond)/10 {
				t.Errorf("held packet %d arrived %v before its time", i, time.Duration(early))
			} else {
				lateMax = max(lateMax, -early)
			}
		case 1:
			if c != 1 {
				t.Errorf("packet %d (accept) arrived %d times", i, c)
			} else if d := p.At[i] - sent[i]; d > int64(hold)/2 {
				t.Errorf("packet %d (accept) took %v: it waited for a held packet", i, time.Duration(d))
			}
		case 2:
			if c != 0 {
				t.Errorf("packet %d (drop) arrived", i)
			}
		}
	}
	hs := q.HoldStats()
	held := uint64(len(sched))
	if hs.Total != held || hs.Released != held || hs.Held != 0 || hs.Full != 0 {
		t.Errorf("HoldStats %+v, want %d held and released", hs, held)
	}
	s := q.Stats()
	if s.Packets != n+1 || s.Accepted != held+n/3 || s.Errors != 0 {
		t.Errorf("Stats %+v", s)
	}
	t.Logf("hold stats %+v; latest arrival after its time %v; stats %+v", hs, time.Duration(lateMax), s)
}

// TestHoldStop: a clean stop gives every held packet its verdict at once,
// and leaves nothing queued in the kernel.
func TestHoldStop(t *testing.T) {
	const queue, n = 3, 200
	p, q := pairQueue(t, Config{Queue: queue})
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		for i := range batch {
			v[i].At = now + int64(time.Hour)
		}
	})
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), 32)
	}
	deadline := time.Now().Add(3 * time.Second)
	for q.HoldStats().Held < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ks, _ := q.KernelStats(); ks.QueueTotal != n || p.N.Load() != 0 {
		t.Fatalf("before the stop: %d queued in the kernel, %d arrived; want %d, 0", ks.QueueTotal, p.N.Load(), n)
	}
	msgs := q.Stats().VerdictMsgs
	took, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.WaitCount(n, 2*time.Second); got != n {
		t.Errorf("after the stop %d of %d held packets arrived", got, n)
	}
	if ks, _ := q.KernelStats(); ks.QueueTotal != 0 {
		t.Errorf("after the stop the kernel still held %d", ks.QueueTotal)
	}
	if m := q.Stats().VerdictMsgs - msgs; m != 1 {
		t.Errorf("the stop gave %d verdict messages for %d held packets, want one batch verdict", m, n)
	}
	if hs := q.HoldStats(); hs.Released != n || hs.Held != 0 {
		t.Errorf("HoldStats %+v", hs)
	}
	t.Logf("Run returned in %v", took)
}

// TestHoldRoom: at most MaxHeld packets are held; HoldRoom says how many
// more may be; a verdict with At beyond it is given at once and counted.
func TestHoldRoom(t *testing.T) {
	const queue, n = 2, 40
	p, q := pairQueue(t, Config{Queue: queue, MaxHeld: 10, MaxQueueLen: 100})
	var rooms []int
	var mu sync.Mutex
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		mu.Lock()
		rooms = append(rooms, q.HoldRoom())
		mu.Unlock()
		for i := range batch {
			v[i].At = now + int64(time.Hour)
		}
	})
	for i := 0; i < n; i++ {
		p.Send(t, uint16(i), 32)
		time.Sleep(time.Millisecond)
	}
	if got := p.WaitCount(n-10, 2*time.Second); got != n-10 {
		t.Errorf("%d arrived, want %d (all but the 10 held)", got, n-10)
	}
	hs := q.HoldStats()
	if hs.Held != 10 || hs.Full != n-10 || hs.MaxHeld != 10 {
		t.Errorf("HoldStats %+v, want 10 held, %d given at once", hs, n-10)
	}
	mu.Lock()
	if len(rooms) == 0 || rooms[0] != 10 || rooms[len(rooms)-1] != 0 {
		t.Errorf("HoldRoom per batch: %v, want 10 first and 0 once full", rooms)
	}
	mu.Unlock()
	stop()
	if got := p.WaitCount(n, 2*time.Second); got != n {
		t.Errorf("after the stop %d of %d arrived", got, n)
	}
	if _, err := Open(Config{Queue: 9, MaxHeld: 60, MaxQueueLen: 100}); err == nil {
		t.Error("Open with MaxHeld above half the queue length succeeded")
	}
}

// TestHoldIdleTimer: with nothing held, Run sleeps as before (the timer is
// disarmed); a single held packet wakes it at its time, well before the
// receive timeout (the timing figure: to well under a millisecond, though
// the netpoller's own timers could not).
func TestHoldIdleTimer(t *testing.T) {
	const queue = 1
	p, q := pairQueue(t, Config{Queue: queue})
	var at atomic.Int64
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		for i := range batch {
			v[i].At = now + int64(37*time.Millisecond) + 123456
			at.Store(v[i].At)
		}
	})
	defer stop()
	for i := 0; i < 20; i++ {
		p.Send(t, uint16(i), 32)
		p.WaitCount(int64(i+1), time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	hs := q.HoldStats()
	if hs.Released != 20 {
		t.Fatalf("HoldStats %+v", hs)
	}
	t.Logf("lateness of 20 lone releases: %+v", hs.Late)
	// Without the timer the release would wait for the receive timeout
	// (100 ms, less the 37 ms held): far later than a loaded machine makes
	// it. Well under a millisecond is the timing figure.
	if hs.Late.P50 > 30*time.Millisecond {
		t.Errorf("lone releases %v late at the median, want well under the receive timeout: the timer did not wake Run", hs.Late.P50)
	}
	timing.Check(t, hs.Late.P50 <= time.Millisecond, "lone releases %v late at the median, want well under 1 ms", hs.Late.P50)
}

// BenchmarkHoldLateness measures how late lone held packets get their
// verdicts (from the departure time to the verdict's write), released one
// at a time with nothing else to do: the timer's wake-up, with the early
// wake and spin (spin=on) and without (spin=off), in alternate rounds of 30
// releases, b.N rounds each. Reported: p50, p99 and max, in µs.
//
//	go test ./nfq -run '^$' -bench HoldLateness -benchtime 4x   (root)
func BenchmarkHoldLateness(b *testing.B) {
	const queue = 12
	p, q := pairQueue(b, Config{Queue: queue})
	stop := runQueue(b, q, func(batch []Packet, v []Verdict, now int64) {
		for i := range batch {
			v[i].At = now + int64(13*time.Millisecond) + 123456
		}
	})
	defer stop()
	saved := q.spinShare.Load()
	hists := [2]latencyHist{newLatencyHist(), newLatencyHist()} // on, off
	seq := 0
	for i := 0; i < b.N; i++ {
		for k, share := range []int64{saved, 1 << 62} {
			q.spinShare.Store(share)
			q.spinTokens = 0 // Run is idle
			for j := 0; j < 30; j++ {
				seq++
				p.Send(b, uint16(seq), 32)
				p.WaitCount(int64(seq), time.Second)
				time.Sleep(7 * time.Millisecond)
			}
			// Run is idle: move this round's counts.
			q.late.mergeInto(&hists[k])
			q.late = newLatencyHist()
		}
	}
	for k, name := range []string{"on", "off"} {
		s := hists[k].stats()
		b.ReportMetric(float64(s.P50.Microseconds()), "p50_us/spin="+name)
		b.ReportMetric(float64(s.P99.Microseconds()), "p99_us/spin="+name)
		b.ReportMetric(float64(s.Max.Microseconds()), "max_us/spin="+name)
	}
}

// BenchmarkHeldVerdicts measures what held packets cost the kernel. Held
// packets stay at the head of the kernel's queue; while any is held, every
// other packet is answered by its id (NFQNL_MSG_VERDICT), and the kernel
// finds it by walking its queue from the head, past every held packet (on
// kernels without a hash table of queued packets). held=N parks N packets
// (held for an hour), then sends b.N more through the queue, each answered
// at once, as BenchmarkQueueLoopback does: ns/op is the whole path per
// packet; write_ns/verdict is the time in the verdict writes per packet
// (the kernel's lookup, reinjection and local delivery). held=0 answers in
// batch verdicts (nothing held), held=1 by id with a walk of one.
//
//	go test ./nfq -run '^$' -bench HeldVerdicts -benchtime 20000x   (root)
func BenchmarkHeldVerdicts(b *testing.B) {
	for _, held := range []int{0, 1, 64, 256, 1024, 4096, 16384} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			const queue = 11
			netnstest.UnshareQueue(b, queue)
			p := netnstest.NewUDPPair(b)
			// Held packets keep their memory charged to the sending socket.
			if rc, err := p.Tx.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 256<<20) })
			}
			var writeNs atomic.Int64
			q := openQueue(b, Config{Queue: queue, MaxQueueLen: 65536, MaxHeld: max(held, 1)}, withTimedWrites(&writeNs))
			var n atomic.Int64
			stop := runQueue(b, q, func(batch []Packet, v []Verdict, now int64) {
				for i := range batch {
					if n.Add(1) <= int64(held) {
						v[i].At = now + int64(time.Hour)
					}
				}
			})
			payload := make([]byte, 32)
			for i := 0; i < held; i++ {
				if _, err := p.Tx.Write(payload); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for q.HoldStats().Held < uint64(held) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if h := q.HoldStats().Held; h != uint64(held) {
				b.Fatalf("%d held, want %d", h, held)
			}
			w0, m0 := writeNs.Load(), q.Stats().VerdictMsgs
			b.ResetTimer()
			blast(b, p, payload, 10*time.Second)
			w, m := writeNs.Load()-w0, q.Stats().VerdictMsgs-m0
			b.ReportMetric(float64(w)/float64(b.N), "write_ns/verdict")
			b.ReportMetric(float64(m)/float64(b.N), "msgs/packet")
			if got := p.N.Load(); got != int64(b.N) {
				b.Errorf("%d of %d arrived", got, b.N)
			}
			stop()
		})
	}
}
