package nfq

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// stop closes the kernel queue's intake (not with FailClosed: see Run),
// gives the held packets their verdicts and answers what is still in the
// socket, for at most stopDrainTimeout, then unbinds the queue, which
// answers what is left.
func (q *Queue) stop() error {
	// The engine's clock, like every deadline of Run's: it follows the
	// monotonic clock, so a wall-clock step cannot end the drain at once
	// (a step back) or make it last (a step forward).
	stopBy := q.now() + int64(stopDrainTimeout)
	q.stopping() // the OnStop hooks (a monitor's last reading), while the queue takes packets
	if !q.cfg.FailClosed {
		q.closeIntake()
	}
	// Every held packet gets its verdict now, before the packets still in
	// the socket (which came later); those get theirs at once too.
	q.halting = true
	if err := q.releaseAll(); err != nil {
		return err
	}
	for q.now() <= stopBy {
		n, errno := q.recvmmsg()
		if errno == unix.EAGAIN {
			break
		}
		if err := q.handle(n, errno); err != nil {
			return err
		}
	}
	return q.finish()
}

// closeIntake sets the kernel queue's length to 0: from now on no packet
// enters the queue (each is accepted without a verdict, or dropped with
// FailClosed), so the socket holds every packet still to answer. Once.
func (q *Queue) closeIntake() {
	if q.intakeClosed {
		return
	}
	q.intakeClosed = true
	q.b.seq++
	buf := configMsg{maxLen: true, queueLen: 0}.append(q.b.out[:0], q.cfg.Queue, q.b.seq)
	if err := q.write(buf); err != nil {
		q.stats.errors.Add(1)
	}
}

// finish unbinds the queue after a stop.
func (q *Queue) finish() error { return q.unbind() }

// quit unbinds the queue when Run gives up for err, and returns err with
// what the unbind could not do (packets left to the kernel).
func (q *Queue) quit(err error) error {
	if uerr := q.unbind(); uerr != nil {
		return fmt.Errorf("%w; %w", err, uerr)
	}
	return err
}

// OnStop registers fn to be called once, when the queue starts to stop
// (Run's context cancelled, Run failing, or Close): from that goroutine,
// while the queue is still bound and before it stops taking packets (a
// fail-open monitor takes its last reading there: package failopen). It
// reports false if the queue has already stopped. Safe to call from any
// goroutine.
func (q *Queue) OnStop(fn func()) bool {
	q.hookMu.Lock()
	defer q.hookMu.Unlock()
	if q.hooksDone {
		return false
	}
	q.hooks = append(q.hooks, fn)
	return true
}

// stopping runs the stop hooks, the first time it is called.
func (q *Queue) stopping() {
	q.hookMu.Lock()
	fns := q.hooks
	q.hooks, q.hooksDone = nil, true
	q.hookMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// unbind unbinds the queue, after running the stop hooks, closing the
// intake, giving the held packets their verdicts and accepting every other
// packet still queued (acceptRest): the kernel drops what a queue holds
// when it is unbound. It keeps the kernel's last counters for KernelStats.
// If packets were left to the kernel it says so, with their number, in the
// error it returns and through Config.Logf. Every path that ends the queue
// comes here: Run's stop and its failures, and Close.
func (q *Queue) unbind() error {
	if q.unbound {
		return nil
	}
	q.stopping()
	q.closeIntake()
	q.halting = true
	if q.hold.len() > 0 {
		// Each by its exact id: on a failure, packets not yet answered
		// may sit below a held one, and a batch verdict would give them
		// its verdict. (If this write fails, acceptRest accepts them.)
		q.rel = q.hold.popAll(q.rel)
		q.b.seq++
		out, msgs := appendReleases(q.b.out[:0], q.cfg.Queue, q.rel, true, q.rel[0].id, q.b.seq)
		if q.writeRetry(out) == nil {
			q.stats.verdictMsgs.Add(uint64(msgs))
			q.released(q.rel, 0)
		} else {
			q.stats.errors.Add(1)
		}
		q.holdCnt.held.Store(0)
	}
	err := q.acceptRest()
	q.unbound = true
	q.b.seq++
	buf := configMsg{cmd: nfqnlCfgCmdUnbind}.append(q.b.out[:0], q.cfg.Queue, q.b.seq)
	_ = q.write(buf)
	if err != nil && q.cfg.Logf != nil {
		q.cfg.Logf("%v", err)
	}
	return err
}

// acceptRounds bounds acceptRest's verdicts: more than one only if packets
// entered the queue after its intake was closed (closeIntake failed).
const acceptRounds = 3

// acceptRest answers ACCEPT, with marks unchanged, every packet still in
// the kernel's queue, answered or not, in one NFQNL_MSG_VERDICT_BATCH for
// the last id the kernel gave (id_sequence in its table): the kernel walks
// the queue from its head, in id order, and takes every packet until one
// whose id is after the given one (nfq_id_after, with wrap-around), and
// only in this queue (the verdict names it and must come from its socket).
// It is for the end: the packets in the socket are never read. It reads
// the counters again to see the queue empty (they are KernelStats' final
// values) and counts what it accepted in Stats.StopAccepted. The error, if
// packets are left, says how many.
func (q *Queue) acceptRest() error {
	for round := 0; ; round++ {
		ks, err := q.readKernel()
		if err == nil {
			q.final.Store(&ks)
			if ks.QueueTotal == 0 {
				return nil
			}
		}
		if round == acceptRounds {
			return fmt.Errorf("nfq: queue %d: %d packets left to the kernel, which drops them as it unbinds the queue: they kept coming after its intake was closed", q.cfg.Queue, ks.QueueTotal)
		}
		id := q.b.lastID + 1<<30
		if err == nil && !idBefore(uint32(ks.IDSequence), q.b.lastID) {
			id = uint32(ks.IDSequence)
		}
		var vb [maxVerdictMsgLen]byte
		q.b.seq++
		n := putVerdict(vb[:], q.cfg.Queue, id, Verdict{}, true, q.b.seq)
		if werr := q.writeRetry(vb[:n]); werr != nil {
			q.stats.errors.Add(1)
			left := "the packets still queued (how many is unknown: " + fmt.Sprint(err) + ")"
			if err == nil {
				left = fmt.Sprintf("%d packets", ks.QueueTotal)
			}
			return fmt.Errorf("nfq: queue %d: %s left to the kernel, which drops them as it unbinds the queue: accepting them: %w", q.cfg.Queue, left, werr)
		}
		q.stats.verdictMsgs.Add(1)
		if err != nil {
			// Without the kernel's table: by id, every packet within 2^30
			// of the last one read, older (unanswered or held) or newer
			// (still in the socket) -- all of them but in theory. Whether
			// any is left cannot be seen.
			return nil
		}
		q.stats.stopAccepted.Add(ks.QueueTotal)
	}
}

// Close unbinds the queue (if Run has not already) and closes the socket.
// Packets still queued in the kernel are accepted first, unread, as by a
// stop (Stats.StopAccepted); the error says how many were left if that
// failed. Close must not be called while Run is running; it is safe to
// call more than once.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		uerr := q.unbind()
		if q.file != nil {
			q.file.Close()
		}
		if q.tfd >= 0 {
			unix.Close(q.tfd)
		}
		if q.sock != nil {
			q.closeErr = q.sock.Close()
		} else {
			q.closeErr = unix.Close(q.fd)
		}
		if q.proc != nil {
			q.proc.Close()
		}
		if uerr != nil {
			q.closeErr = uerr
		}
	})
	return q.closeErr
}
