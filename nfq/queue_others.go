//go:build !linux

package nfq

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Queue is one bound NFQUEUE queue; NFQUEUE exists only on Linux.
type Queue struct{}

// Open fails: NFQUEUE exists only on Linux.
func Open(c Config) (*Queue, error) {
	return nil, fmt.Errorf("nfq: queue %d: %w: NFQUEUE is not implemented on %s", c.Queue, ErrNoSupport, runtime.GOOS)
}

func (q *Queue) Run(ctx context.Context, fn Handler) error { return ErrNoSupport }
func (q *Queue) Close() error                              { return nil }
func (q *Queue) Stats() Stats                              { return Stats{} }
func (q *Queue) KernelStats() (KernelStats, error)         { return KernelStats{}, ErrNotBound }
func (q *Queue) Latency() LatencyStats                     { return LatencyStats{} }
func (q *Queue) PortID() uint32                            { return 0 }
func (q *Queue) Owners() bool                              { return false }
func (q *Queue) Conntrack() bool                           { return false }
func (q *Queue) Wake()                                     {}
func (q *Queue) LatencyHistogram(bounds []time.Duration) LatencyHistogram {
	return LatencyHistogram{Cumulative: make([]uint64, len(bounds))}
}
func (q *Queue) LateHistogram(bounds []time.Duration) LatencyHistogram {
	return LatencyHistogram{Cumulative: make([]uint64, len(bounds))}
}
func (q *Queue) HoldRoom() int        { return 0 }
func (q *Queue) HoldStats() HoldStats { return HoldStats{} }
func (q *Queue) Config() Config       { return Config{} }
func (q *Queue) Bound() bool          { return false }
func (q *Queue) OnStop(func()) bool   { return false }
