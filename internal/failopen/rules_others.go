//go:build !linux

package failopen

import (
	"fmt"
	"runtime"

	"github.com/packetshaper/packetshaper/nfq"
)

// QueueRules fails: nf_tables exists only on Linux.
func QueueRules() ([]QueueRule, error) {
	return nil, fmt.Errorf("nfq: %w: nf_tables is not implemented on %s", nfq.ErrNoSupport, runtime.GOOS)
}
