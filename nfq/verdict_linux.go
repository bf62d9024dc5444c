package nfq

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// answer hands the current batch to fn and sends its verdicts. If the
// verdicts cannot be sent even after retries, it unbinds the queue (after
// accepting everything queued: see unbind) and returns an error: going on
// would let a later batch verdict answer these packets with another
// packet's verdict.
//
// Held packets that are due go out first, in the same write: a packet of a
// flow answered now must not overtake one of the same flow held before it.
// Packets of the batch whose verdict has At are held (see hold.go).
func (q *Queue) answer(fn Handler, now int64) error {
	b := q.b
	v := b.verdicts[:len(b.pkts)]
	clear(v)
	fn(b.pkts, v, now)
	out := b.out[:0]
	msgs := 0
	var rel []heldPkt
	if q.hold.len() > 0 {
		out, msgs, rel = q.appendDue(out, now)
	}
	heldBefore := q.hold.len() > 0
	var drops uint64
	held := 0
	for i := range v {
		if at := v[i].At; at != 0 {
			if at > now && !q.halting && !q.hold.full() {
				q.hold.push(heldPkt{at: at, id: b.pkts[i].ID, mark: v[i].Mark, action: v[i].Action, setMark: v[i].SetMark})
				held++
				continue
			}
			if at > now && !q.halting {
				q.holdCnt.full.Add(1)
			}
			v[i].At = 0
		}
		if v[i].Action == Drop {
			drops++
		}
	}
	b.seq++
	out, m := appendVerdicts(out, b.queue, b.pkts, v, heldBefore, b.seq)
	msgs += m
	var sent int64
	if len(rel) > 0 {
		sent = q.now()
	}
	if len(out) > 0 {
		if err := q.writeRetry(out); err != nil {
			q.stats.errors.Add(1)
			return q.quit(fmt.Errorf("nfq: queue %d: sending verdicts: %w", q.cfg.Queue, err))
		}
	}
	if q.cfg.Latency {
		sent := time.Now().UnixNano()
		var sum int64
		for i := range b.pkts {
			if ts := b.pkts[i].Timestamp; ts != 0 && v[i].At == 0 {
				q.latency.add(sent - ts)
				sum += max(sent-ts, 0)
			}
		}
		q.latency.addSum(sum)
	}
	n := uint64(len(b.pkts) - held)
	q.stats.packets.Add(n)
	q.stats.accepted.Add(n - drops)
	q.stats.dropped.Add(drops)
	q.stats.batches.Add(1)
	q.stats.verdictMsgs.Add(uint64(msgs))
	b.pkts = b.pkts[:0]
	if held > 0 {
		q.holdCnt.total.Add(uint64(held))
	}
	if len(rel) > 0 {
		q.released(rel, sent)
	}
	if held > 0 || len(rel) > 0 {
		n := uint64(q.hold.len())
		q.holdCnt.held.Store(n)
		if n > q.holdCnt.peak.Load() {
			q.holdCnt.peak.Store(n)
		}
		q.arm()
	}
	return nil
}

// writeRetry is write that retries the transient failures (no memory or
// buffer space for the moment) for up to about 100 ms.
func (q *Queue) writeRetry(b []byte) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = q.write(b); err == nil {
			return nil
		}
		if !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EAGAIN) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return err
}

// write sends verdict (or configuration) messages, through q.writer:
// writeSys, which a test may wrap.
func (q *Queue) write(b []byte) error { return q.writer(b) }

// writeSys sends messages; the kernel processes them before write returns,
// without waiting for anything but memory, so it is a raw system call (see
// "Why Run waits in the netpoller").
func (q *Queue) writeSys(b []byte) error {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(q.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
