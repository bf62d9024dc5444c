package nfq

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// releaseEarly is how early a held packet may get its verdict: the timer
// wakes Run at the earliest time, and every packet due within this much of
// it is released in the same write, which also spares re-arming the timer
// for the few hundred nanoseconds between the engine's clock and the
// timer's.
const releaseEarly = int64(5 * time.Microsecond)

// appendDue appends to out the verdicts of the held packets due by now
// (see releaseEarly) and returns them, taken off the heap.
func (q *Queue) appendDue(out []byte, now int64) ([]byte, int, []heldPkt) {
	rel, still, minHeld := q.hold.popDue(q.rel, now+releaseEarly)
	q.rel = rel
	if len(rel) == 0 {
		return out, 0, nil
	}
	q.b.seq++
	out, msgs := appendReleases(out, q.cfg.Queue, rel, still, minHeld, q.b.seq)
	return out, msgs, rel
}

// Waking on time. A timer's expiry reaches Run's goroutine only after the
// kernel has woken the thread waiting in the netpoller and the runtime has
// run the goroutine: on an idle virtual CPU that is tens of microseconds
// (BenchmarkHoldLateness gives the lateness with and without the early
// wake and spin; docs/design.md, "Holding packets", its figures), more than
// the verdict itself. So the timer is set to fire that long before the
// departure, and Run, woken early, spins until it: the spin is the wake-up
// latency it saves, at most spinMax per wake-up (not per packet: what is
// due together leaves in one write). The lead, spinAhead, follows the
// wake-ups' lateness as measured: up at once to a late one, down slowly, so
// it sits near their high percentiles; a wake-up later than spinMaxObserve
// (a stalled CPU, not the timer's doing) is not counted. Spinning takes at
// most a twentieth of a CPU (spinShare, with bursts of spinBurst): when
// departures come faster than that allows (20 Mbit/s of 1500-byte packets
// is one every 600 µs), the timer is set to the departure itself and the
// wake-up's lateness is the verdict's.
const (
	spinMax        = int64(250 * time.Microsecond)
	spinMin        = int64(10 * time.Microsecond)
	spinMaxObserve = int64(5 * time.Millisecond)
	wakeEstStart   = int64(50 * time.Microsecond)
	spinBurst      = int64(5 * time.Millisecond)
)

// defaultSpinShare: spinning takes at most 1/defaultSpinShare of a CPU
// (Queue.spinShare: the benchmark that compares without it changes it).
const defaultSpinShare = 20

// spinRoom is how long Run may spin now (see spinShare).
func (q *Queue) spinRoom(now int64) int64 {
	if now > q.spinLast {
		q.spinTokens = min(q.spinTokens+(now-q.spinLast)/q.spinShare.Load(), spinBurst)
		q.spinLast = now
	}
	return q.spinTokens
}

// spinAhead is how early the timer fires before a departure.
func (q *Queue) spinAhead() int64 {
	return min(max(q.wakeEst+q.wakeEst/2, spinMin), spinMax)
}

// observeWake updates the estimate of the timer's wake-up lateness.
func (q *Queue) observeWake(late int64) {
	if late > spinMaxObserve {
		return
	}
	if late > q.wakeEst {
		q.wakeEst += (late - q.wakeEst) / 2
	} else {
		q.wakeEst -= (q.wakeEst - late) / 32
	}
}

// releaseDue gives the held packets that are due their verdicts, in one
// write, and sets the timer to the next. If the first is due within
// spinAhead (Run was woken early for it), it waits for it, spinning.
func (q *Queue) releaseDue() error {
	now := q.now()
	if q.fire != 0 && now >= q.fire {
		// The timer has fired (or would have): how late did Run see it?
		q.observeWake(now - q.fire)
		q.armed, q.fire = 0, 0
	}
	if at := q.hold.top().at; at > now+releaseEarly {
		if at-now > q.spinAhead() || at-now > q.spinRoom(now) {
			q.arm()
			return nil
		}
		t0 := now
		for now < at-releaseEarly {
			now = q.now()
		}
		q.spinTokens -= now - t0
	}
	out, msgs, rel := q.appendDue(q.b.out[:0], now)
	return q.sendReleases(out, msgs, rel)
}

// releaseAll gives every held packet its verdict now, in one write: one
// batch verdict when they all have the same (nothing else is unanswered
// below their ids).
func (q *Queue) releaseAll() error {
	if q.hold.len() == 0 {
		return nil
	}
	q.rel = q.hold.popAll(q.rel)
	q.b.seq++
	out, msgs := appendReleases(q.b.out[:0], q.cfg.Queue, q.rel, false, 0, q.b.seq)
	return q.sendReleases(out, msgs, q.rel)
}

func (q *Queue) sendReleases(out []byte, msgs int, rel []heldPkt) error {
	sent := q.now()
	if err := q.writeRetry(out); err != nil {
		q.stats.errors.Add(1)
		return q.quit(fmt.Errorf("nfq: queue %d: sending verdicts: %w", q.cfg.Queue, err))
	}
	q.stats.verdictMsgs.Add(uint64(msgs))
	q.released(rel, sent)
	q.holdCnt.held.Store(uint64(q.hold.len()))
	q.arm()
	return nil
}

// released counts packets whose verdicts were just sent, in a write that
// began at sent, and how late.
func (q *Queue) released(rel []heldPkt, sent int64) {
	var drops uint64
	for i := range rel {
		if rel[i].action == Drop {
			drops++
		}
		if !q.halting {
			late := max(sent-rel[i].at, 0)
			q.late.add(late)
			q.late.addSum(late)
		}
	}
	n := uint64(len(rel))
	q.stats.packets.Add(n)
	q.stats.accepted.Add(n - drops)
	q.stats.dropped.Add(drops)
	q.holdCnt.released.Add(n)
}

// arm sets the hold timer to fire spinAhead before the first held packet
// is due, or disarms it. A time already past fires at once.
func (q *Queue) arm() {
	var at int64
	if q.hold.len() > 0 {
		at = q.hold.top().at
	}
	if at == q.armed || q.tfd < 0 {
		return
	}
	q.armed, q.fire = at, 0
	var its unix.ItimerSpec
	if at != 0 {
		q.fire = at
		if lead := q.spinAhead(); q.spinRoom(q.now()) >= lead {
			q.fire -= lead
		}
		its.Value = unix.NsecToTimespec(max(q.monoBase+(q.fire-q.baseNs), 1))
	}
	// Never blocks: a raw call, as write.
	if _, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(q.tfd), unix.TFD_TIMER_ABSTIME,
		uintptr(unsafe.Pointer(&its)), 0, 0, 0); e != 0 {
		q.stats.errors.Add(1)
		q.armed, q.fire = -1, 0 // try again next time
	}
}

// HoldRoom is how many more packets a Handler may hold (Verdict.At) before
// the next batch: Config.MaxHeld less those held now. For the Handler,
// from Run's goroutine. While Run stops it is MaxHeld: verdicts are then
// given at once, At or not.
func (q *Queue) HoldRoom() int {
	if q.halting {
		return q.cfg.MaxHeld
	}
	return q.cfg.MaxHeld - q.hold.len()
}

// HoldStats returns the counts of held packets. It is safe to call
// concurrently with Run.
func (q *Queue) HoldStats() HoldStats {
	return HoldStats{
		Held:     q.holdCnt.held.Load(),
		Peak:     q.holdCnt.peak.Load(),
		MaxHeld:  q.cfg.MaxHeld,
		Total:    q.holdCnt.total.Load(),
		Released: q.holdCnt.released.Load(),
		Full:     q.holdCnt.full.Load(),
		Late:     q.late.stats(),
	}
}
