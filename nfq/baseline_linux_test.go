package nfq

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"

	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
)

// BenchmarkConsumers is the reason nfq has its own receive loop, measured in
// one run on one setup: UDP over lo in a test namespace, queued by an
// iptables NFQUEUE rule, answered ACCEPT by
//
//   - nfq: this package's Run (recvmmsg, verdicts in batches, one locked
//     thread, no allocation), and
//   - go-nfqueue: the naive consumer with github.com/florianl/go-nfqueue/v2
//     (v2.1.0, over github.com/mdlayher/netlink) as its README shows it:
//     Register with a callback that calls SetVerdict once per packet, the
//     whole packet copied (like ../shared/nfqbench's go_accept).
//
// Both queues are fail-closed, and the sender keeps at most `window` packets
// in flight (sent but not yet received), far fewer than the queue holds: no
// packet is dropped or bypasses the consumer (via_queue_% shows it), and
// ns/op is the time per packet of the whole path with the consumer as the
// bottleneck. allocs/op and B/op count every allocation of the process per
// packet (sender, receiver and consumer). Compare the two lines of one run:
//
//	go test ./nfq -run '^$' -bench Consumers -benchmem -benchtime 100000x -count 3   (root)
func BenchmarkConsumers(b *testing.B) {
	b.Run("nfq", func(b *testing.B) {
		const queue = 11
		p, q := pairQueue(b, Config{Queue: queue, FailClosed: true})
		stop := runQueue(b, q, func([]Packet, []Verdict, int64) {})
		windowedSend(b, p)
		stop()
		b.ReportMetric(100*float64(q.Stats().Packets)/float64(b.N), "via_queue_%")
	})
	b.Run("go-nfqueue", func(b *testing.B) {
		const queue = 12
		netnstest.UnshareQueue(b, queue)
		p := netnstest.NewUDPPair(b)
		nf, err := nfqueue.Open(&nfqueue.Config{
			NfQueue:      queue,
			MaxPacketLen: 0xffff,
			MaxQueueLen:  DefaultMaxQueueLen,
			Copymode:     nfqueue.NfQnlCopyPacket,
		})
		if err != nil {
			b.Fatalf("go-nfqueue Open: %v", err)
		}
		b.Cleanup(func() { nf.Close() })
		var packets, errs int64 // read after cancel and Close only
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		err = nf.RegisterWithErrorFunc(ctx, func(a nfqueue.Attribute) int {
			if a.PacketID == nil {
				return 0
			}
			if err := nf.SetVerdict(*a.PacketID, nfqueue.NfAccept); err != nil {
				errs++
			} else {
				packets++
			}
			return 0
		}, func(err error) int {
			if ctx.Err() != nil {
				return 1 // stop
			}
			errs++
			return 0
		})
		if err != nil {
			b.Fatalf("go-nfqueue Register: %v", err)
		}
		windowedSend(b, p)
		cancel()
		nf.Close()
		time.Sleep(10 * time.Millisecond) // let its receive goroutine see the close
		if errs != 0 {
			b.Errorf("go-nfqueue: %d errors", errs)
		}
		b.ReportMetric(100*float64(packets)/float64(b.N), "via_queue_%")
	})
}

// window is how many packets windowedSend keeps in flight: enough to let a
// consumer read in batches, far below the queue length (fail-closed queues
// then never drop).
const window = 256

// windowedSend sends b.N datagrams over p, never more than window ahead of
// the receiver, and waits for all of them (at most 10 s after the last).
func windowedSend(b *testing.B, p *netnstest.UDPPair) {
	b.Helper()
	payload := make([]byte, 32)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for int64(i)-p.N.Load() >= window {
			runtime.Gosched()
		}
		if _, err := p.Tx.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
	got := p.WaitCount(int64(b.N), 10*time.Second)
	b.StopTimer()
	if got != int64(b.N) {
		b.Fatal(fmt.Sprintf("received %d of %d packets", got, b.N))
	}
}
