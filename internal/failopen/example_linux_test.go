package failopen_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/nfq"
)

// How a shaper serving queues 0 and 1 wires the Monitor: hints about
// unserved queues at startup, the monitor beside the queues, the fail-open
// counts in its stats lines.
func ExampleMonitor() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var qs []*nfq.Queue
	for _, n := range []uint16{0, 1} {
		q, err := nfq.Open(nfq.Config{Queue: n})
		if err != nil {
			log.Error(err.Error())
			return
		}
		defer q.Close()
		qs = append(qs, q)
	}

	// Startup hint: rules that send to queues nobody serves.
	if rules, err := failopen.QueueRules(); err == nil {
		bound, _ := nfq.BoundQueues()
		for _, u := range failopen.UnservedQueues(rules, bound) {
			log.Warn(u.String())
		}
	}

	m, err := failopen.NewMonitor(qs, failopen.MonitorConfig{Logger: log})
	if err != nil {
		log.Error(err.Error())
		return
	}
	defer m.Close() // runs after wg.Wait: the queues have stopped
	go m.Run(ctx)

	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.Run(ctx, func(b []nfq.Packet, v []nfq.Verdict, now int64) {})
		}()
	}
	wg.Wait() // each Run took the monitor's last reading before unbinding

	f := m.Total()
	ks, _ := qs[0].KernelStats() // the final counters, read before the unbind
	log.Info("final stats", "queue_drops", ks.QueueDropped,
		"failopen_secs", f.Secs, "failopen_passed", f.Passed, "failopen_exact", f.Exact)
}
