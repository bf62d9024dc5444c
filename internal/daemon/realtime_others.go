//go:build !linux

package daemon

import (
	"fmt"
	"runtime"

	"github.com/packetshaper/packetshaper/nfq"
)

// setProcessRealtime fails: SCHED_FIFO is set here only on Linux.
func setProcessRealtime(prio int) error {
	return fmt.Errorf("real-time priority %d: %w: not implemented on %s", prio, nfq.ErrNoSupport, runtime.GOOS)
}
