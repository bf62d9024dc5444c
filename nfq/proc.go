package nfq

import (
	"errors"
	"strconv"
	"strings"
)

// KernelStats are the kernel's counters of one queue, from
// /proc/net/netfilter/nfnetlink_queue.
type KernelStats struct {
	PortID       uint32 // netlink port of the socket bound to the queue
	QueueTotal   uint64 // packets queued now, waiting for a verdict
	CopyRange    uint32
	QueueDropped uint64 // packets that found the queue full (accepted if fail-open)
	UserDropped  uint64 // packets the kernel could not send to the socket (buffer full)
	IDSequence   uint64 // last packet id: packets ever queued
}

// ErrNotBound is returned by KernelStats when the queue is not bound.
var ErrNotBound = errors.New("nfq: queue not bound")

// parseProcLine parses one line of /proc/net/netfilter/nfnetlink_queue:
// queue_num peer_portid queue_total copy_mode copy_range queue_dropped
// user_dropped id_sequence 1
func parseProcLine(line string) (KernelStats, uint16, bool) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return KernelStats{}, 0, false
	}
	var v [8]uint64
	for i := range v {
		x, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return KernelStats{}, 0, false
		}
		v[i] = x
	}
	return KernelStats{
		PortID:       uint32(v[1]),
		QueueTotal:   v[2],
		CopyRange:    uint32(v[4]),
		QueueDropped: v[5],
		UserDropped:  v[6],
		IDSequence:   v[7],
	}, uint16(v[0]), true
}
