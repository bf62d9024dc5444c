//go:build !linux

package nfq

import (
	"fmt"
	"runtime"
)

// BoundQueues fails: NFQUEUE exists only on Linux.
func BoundQueues() ([]uint16, error) {
	return nil, fmt.Errorf("nfq: %w: NFQUEUE is not implemented on %s", ErrNoSupport, runtime.GOOS)
}
