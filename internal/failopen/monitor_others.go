//go:build !linux

package failopen

import (
	"context"
	"fmt"
	"runtime"

	"github.com/packetshaper/packetshaper/nfq"
)

// Monitor counts fail-open passes; NFQUEUE exists only on Linux.
type Monitor struct{}

// NewMonitor fails: NFQUEUE exists only on Linux.
func NewMonitor(qs []*nfq.Queue, c MonitorConfig) (*Monitor, error) {
	return nil, fmt.Errorf("nfq: monitor: %w: NFQUEUE is not implemented on %s", nfq.ErrNoSupport, runtime.GOOS)
}

func (m *Monitor) Run(ctx context.Context) error    { return nfq.ErrNoSupport }
func (m *Monitor) Stats(queue uint16) FailOpenStats { return FailOpenStats{} }
func (m *Monitor) Total() FailOpenStats             { return FailOpenStats{} }
func (m *Monitor) Close() error                     { return nil }
