package daemon

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
)

// BenchmarkDecideQueues measures the cost per packet (ns/op is per packet)
// of deciding batches as the queues deliver them: 64 packets of 256
// sources ("src" key, most over their limit), with
//
//   - queues=1: one queue's goroutine and its engine (the lock taken once
//     per batch, never contended);
//   - queues=4: four queues' workers sharing the one engine, their batches
//     taking turns on one goroutine: the path's own cost (the lock, one
//     table for the keys of every queue), without contention;
//   - queues=4-concurrent: four queue goroutines at once, deciding batch
//     after batch with nothing else to do, so that each batch waits for
//     the lock: the worst case, as all four queues were full at once (a
//     live queue also spends time in its receive and verdict system calls,
//     outside the lock).
//
// Compare the two in the same run (queues=4 / queues=1, cpu-ns/packet: the
// process's CPU time per packet, which the machine's other load changes
// less than the wall time), as the median of several runs of
//
//	go test -run '^$' -bench DecideQueues -count 1 -benchtime 1000000x ./internal/daemon/
func BenchmarkDecideQueues(b *testing.B) {
	b.Run("queues=1", func(b *testing.B) { benchQueues(b, 1, false) })
	b.Run("queues=4", func(b *testing.B) { benchQueues(b, 4, false) })
	b.Run("queues=4-concurrent", func(b *testing.B) { benchQueues(b, 4, true) })
}

func benchQueues(b *testing.B, nq int, concurrent bool) {
	sh, _ := newTestEngine(b, srcPolicy("100"), mqQueues[:nq]...)
	ws := sh.ws
	const batchLen = 64
	batches := make([][]nfq.Packet, nq)
	for q := range batches {
		for i := range batchLen {
			d := udpFrom(1+(q*batchLen+i)%256, uint16(1000+i))
			batches[q] = append(batches[q], nfq.Packet{Data: d, Len: len(d)})
		}
	}
	// The flows enter the table.
	start := time.Now().UnixNano()
	for q, w := range ws {
		w.decide(batches[q], make([]nfq.Verdict, batchLen), start)
	}
	perQueue := (b.N + batchLen*nq - 1) / (batchLen * nq) // batches per queue
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	if !concurrent {
		v := make([]nfq.Verdict, batchLen)
		now := start
		for range perQueue {
			now += int64(50 * time.Microsecond)
			for q, w := range ws {
				clear(v)
				w.decide(batches[q], v, now)
			}
		}
	}
	var wg sync.WaitGroup
	for q, w := range ws {
		if !concurrent {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]nfq.Verdict, batchLen)
			now := start
			for range perQueue {
				now += int64(50 * time.Microsecond)
				clear(v)
				w.decide(batches[q], v, now)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// The wall time and the process's CPU time (user and system, every
	// thread: spinning on the lock counts) over the packets decided. On a
	// shared machine the wall time depends on what else runs; the CPU time
	// is what deciding costs.
	pkts := float64(perQueue * batchLen * nq)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pkts, "ns/packet")
	b.ReportMetric(float64(cpuTime()-cpu0)/pkts, "cpu-ns/packet")
}

// cpuTime is the process's CPU time so far, user and system, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
