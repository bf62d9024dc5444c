package nfq

import (
	"errors"
)

// KernelStats are the kernel's counters of one queue, from
// /proc/net/netfilter/nfnetlink_queue.
type KernelStats struct {
	PortID       uint32 // netlink port of the socket bound to the queue
	QueueTotal   uint64 // packets queued now, waiting for a verdict
	CopyRange    uint32
	QueueDropped uint64 // packets that found the queue full and were dropped (fail-closed); fail-open passes are not counted here
	UserDropped  uint64 // packets the kernel could not send to the socket (buffer full), when fail-closed
	IDSequence   uint64 // last packet id: packets ever queued (a 32-bit counter in the kernel)
}

// ErrNotBound is returned by KernelStats when the queue is not bound.
var ErrNotBound = errors.New("nfq: queue not bound")

// parseProcLine parses one line of /proc/net/netfilter/nfnetlink_queue:
// queue_num peer_portid queue_total copy_mode copy_range queue_dropped
// user_dropped id_sequence 1
func parseProcLine(line string) (KernelStats, uint16, bool) {
	return parseProcBytes([]byte(line))
}

// parseProcBytes is parseProcLine on bytes, without allocating.
func parseProcBytes(line []byte) (KernelStats, uint16, bool) {
	var v [8]uint64
	i := 0
	for f := 0; f < len(v); f++ {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		start := i
		var x uint64
		for i < len(line) && line[i] >= '0' && line[i] <= '9' {
			d := uint64(line[i] - '0')
			if x > (1<<64-1-d)/10 {
				return KernelStats{}, 0, false
			}
			x = x*10 + d
			i++
		}
		if i == start || (i < len(line) && line[i] != ' ' && line[i] != '\t') {
			return KernelStats{}, 0, false
		}
		v[f] = x
	}
	if v[0] > 0xffff {
		return KernelStats{}, 0, false
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

// eachProcLine calls fn for every well-formed line of the file's contents b.
func eachProcLine(b []byte, fn func(queue uint16, ks KernelStats)) {
	for len(b) > 0 {
		n := 0
		for n < len(b) && b[n] != '\n' {
			n++
		}
		if ks, q, ok := parseProcBytes(b[:n]); ok {
			fn(q, ks)
		}
		if n == len(b) {
			break
		}
		b = b[n+1:]
	}
}
