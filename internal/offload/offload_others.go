//go:build !linux

package offload

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// Offloader pushes flows into the kernel's offload sets; nftables exists
// only on Linux.
type Offloader struct{ c counters }

// Open fails: nftables exists only on Linux.
func Open(c Config) (*Offloader, error) {
	return nil, fmt.Errorf("offload: not implemented on %s (nftables is Linux only)", runtime.GOOS)
}

func (o *Offloader) Add(k flows.Key, l shaper.OffloadLimit) {
	if o != nil {
		o.c.lost.Add(1)
	}
}
func (o *Offloader) Stats() Stats {
	if o == nil {
		return Stats{}
	}
	return o.c.stats()
}
func (o *Offloader) Timeout() time.Duration { return 0 }
func (o *Offloader) Close() error           { return nil }
func (o *Offloader) Clear() error           { return nil }
func (o *Offloader) KernelDrops() (packets, bytes uint64, err error) {
	return 0, 0, errors.New("offload: not implemented on " + runtime.GOOS)
}
