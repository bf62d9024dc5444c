//go:build !linux

package nfq

import (
	"fmt"
	"runtime"
)

// QueueRules fails: nf_tables exists only on Linux.
func QueueRules() ([]QueueRule, error) {
	return nil, fmt.Errorf("nfq: %w: nf_tables is not implemented on %s", ErrNoSupport, runtime.GOOS)
}

// BoundQueues fails: NFQUEUE exists only on Linux.
func BoundQueues() ([]uint16, error) {
	return nil, fmt.Errorf("nfq: %w: NFQUEUE is not implemented on %s", ErrNoSupport, runtime.GOOS)
}
