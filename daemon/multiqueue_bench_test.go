package daemon

import (
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// BenchmarkDecideQueues measures the cost per packet (ns/op is per packet)
// of deciding batches as the queues deliver them: 64 packets of 256
// sources ("src" key, most over their limit), with
//
//   - queues=1: one queue's goroutine and its engine (the lock taken once
//     per batch, never contended);
//   - queues=4: four queue goroutines at once, sharing the one engine, a
//     batch each under the lock in turn (contended: GOMAXPROCS is what the
//     machine gives).
//
// Compare the two in the same run (queues=4 / queues=1), as the median of
// several runs: scripts or
//
//	go test -run '^$' -bench DecideQueues -count 1 ./daemon/
//
// alternately, several times.
func BenchmarkDecideQueues(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run("queues="+string(rune('0'+n)), func(b *testing.B) { benchQueues(b, n) })
	}
}

func benchQueues(b *testing.B, nq int) {
	const pol = `
[[rule]]
name = "per-src"
match = { proto = ["udp"] }
key = "src"
pps = 100
burst = 5
`
	eng, err := shaper.NewPolicy(compilePolicy(b, pol))
	if err != nil {
		b.Fatal(err)
	}
	ws := newWorkers(mqQueues[:nq], eng)
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
	b.ResetTimer()
	var wg sync.WaitGroup
	for q, w := range ws {
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
	// ns/op per packet: the time over the packets decided.
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(perQueue*batchLen*nq), "ns/packet")
}
