package nfq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// idleEvery is how often Run calls Config.Idle (also while packets flow:
// the wait for them is what it bounds).
const idleEvery = 100 * time.Millisecond

// maxFailures is how many unexpected receive errors in a row make Run give
// up instead of spinning on a broken socket.
const maxFailures = 1000

// Run reads packets and answers them until ctx is cancelled, calling fn for
// each batch from Run's goroutine. Batches are read with one recvmmsg and
// answered with one write, as soon as the socket has no more to give or
// BatchSize packets have been read; the clock is read once per batch. When
// the socket is empty, Run's goroutine waits in the runtime's netpoller,
// like a net.Conn read, and holds no thread. A packet whose verdict has At
// is held and answered at At, in the write of the batch then at hand or
// alone, Run waking for it (see hold.go).
//
// When ctx is cancelled, Run runs the OnStop hooks (a fail-open monitor
// takes its last reading); sets the kernel queue's length to 0, so that new packets bypass
// it (accepted) instead of waiting (with FailClosed the queue keeps taking
// packets until the end of the stop instead: a stop does not drop them as
// an overload would); gives every held packet its verdict at once;
// answers, through fn and at once, every packet already queued, for at
// most half a second (stopDrainTimeout, on the monotonic clock); then
// answers whatever the queue still holds ACCEPT, in one batch verdict,
// with marks unchanged (Stats.StopAccepted), reads the kernel's counters
// (KernelStats keeps them), unbinds the queue and returns nil, all within
// about 0.6 s. The unbind drops what is still queued, so no path unbinds
// before that last verdict. Run returns an error if the socket fails for
// good (reads keep failing, or verdicts cannot be written): then, too,
// everything queued is accepted by one batch verdict before the unbind,
// and if even that verdict cannot be written, the error says how many
// packets were left to the kernel. Run may be called once.
func (q *Queue) Run(ctx context.Context, fn Handler) error {
	if !q.running.CompareAndSwap(false, true) {
		return errors.New("nfq: Run called twice")
	}
	if q.unbound {
		return errors.New("nfq: Run on a closed queue")
	}
	if err := q.startPoll(); err != nil {
		return q.quit(fmt.Errorf("nfq: queue %d: %w", q.cfg.Queue, err))
	}
	// A cancellation ends the wait at once: a read deadline in the past.
	stopWake := context.AfterFunc(ctx, func() {
		q.sock.SetReadDeadline(time.Unix(1, 0))
		q.file.SetReadDeadline(time.Unix(1, 0))
	})
	defer stopWake()

	// The engine's clock: nanoseconds since the Unix epoch as of now, then
	// advanced by the monotonic clock. A wall-clock step (NTP, date -s)
	// after start moves neither the windows nor the buckets: a step back
	// would otherwise freeze every flow's refill until the clock caught up.
	var m1, m2 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1)
	q.base = time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2)
	q.baseNs = q.wallNs(q.base)
	// The monotonic clock at base, for the hold timer: Go's monotonic
	// clock is CLOCK_MONOTONIC, so engine time t is monoBase + t − baseNs.
	q.monoBase = (m1.Nano() + m2.Nano()) / 2
	q.fn, q.done = fn, ctx.Done()

	// Serve until cancelled: serve reads and answers batches, and returns
	// to the netpoller to wait, inside one read call: on the socket, or
	// while packets are held on the socket and the hold timer (serve
	// returns to switch). With an Idle hook, the wait ends every
	// idleEvery to call it.
	for {
		q.waitHeld = q.hold.len() > 0
		if q.waitHeld != q.sockInSet {
			q.setSockInSet(q.waitHeld)
		}
		f, rc := q.sock, q.sockRC
		if q.waitHeld {
			f, rc = q.file, q.rc
		}
		if q.cfg.Idle != nil {
			f.SetReadDeadline(time.Now().Add(idleEvery))
			// A cancellation or a Wake between the last check and this
			// deadline would be overwritten by it: look again. (Both
			// store their flag before their past deadline: a flag not
			// seen here comes with a deadline set after this one.)
			select {
			case <-q.done:
				return q.stop()
			default:
			}
			if q.wake.Swap(false) {
				q.cfg.Idle(q.now())
			}
		}
		err := rc.Read(q.serveFn)
		if q.runErr != nil {
			return q.runErr
		}
		select {
		case <-q.done:
			return q.stop()
		default:
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			q.wake.Store(false)
			q.cfg.Idle(q.now())
			continue
		}
		if err != nil {
			// The netpoller refuses to wait after an error event with
			// nothing to read (EPOLLERR alone), or the socket was closed:
			// a read says which (the socket's error, EBADF). If it finds
			// nothing either, wait a little rather than spin until the
			// next event clears the state.
			n, errno := q.recvmmsg()
			if errno == unix.EAGAIN {
				time.Sleep(time.Millisecond)
				continue
			}
			if err := q.handle(n, errno); err != nil {
				return err
			}
		}
	}
}

// serve is Run's read callback (syscall.RawConn.Read): it reads and
// answers batches while the socket has some, and returns false to wait in
// the netpoller until the socket is readable again, true to return to Run
// (cancelled, or failed: runErr).
//
// A read that returns fewer than BatchSize datagrams found the socket
// empty, so serve waits at once instead of reading again only to get
// EAGAIN: one system call less per wake-up. No wake-up is lost: a packet
// queued after that read is announced to the netpoller, which either
// wakes the wait or, if the wait has not begun, makes it return at once
// (all inside one Read, whose readiness state is reset only when Read
// starts). The one other way a read ends early is an error after some
// datagrams; the kernel keeps it for the next read without a new event,
// but for this socket that error is an overrun (ENOBUFS), which the kernel
// checks before every datagram, so it was raised during the read, after
// the wait that preceded it, and the overrun's own event is still to be
// delivered.
//
// When packets come to be held (or the last is released), the wait must
// include the hold timer (or need not): serve returns to Run to wait on the
// other file, after a read, since the next Read starts with its readiness
// reset.
func (q *Queue) serve(uintptr) bool {
	for {
		select {
		case <-q.done:
			return true
		default:
		}
		if q.hold.len() > 0 {
			if err := q.releaseDue(); err != nil {
				q.runErr = err
				return true
			}
		}
		if q.drained {
			q.drained = false
			return q.waitHeld != (q.hold.len() > 0)
		}
		n, errno := q.recvmmsg()
		if errno == unix.EAGAIN {
			return q.waitHeld != (q.hold.len() > 0)
		}
		q.drained = errno == 0 && n < len(q.mmsgs)
		if err := q.handle(n, errno); err != nil {
			q.runErr = err
			return true
		}
	}
}

// now is the engine's clock (see Run).
func (q *Queue) now() int64 { return q.baseNs + int64(time.Since(q.base)) }

// handle answers the n datagrams that a read returned, or deals with its
// error. It returns an error only when Run must stop: the socket is gone,
// reads keep failing, or verdicts cannot be sent.
func (q *Queue) handle(n int, errno unix.Errno) error {
	if errno != 0 {
		switch errno {
		case unix.EAGAIN, unix.EINTR:
			return nil
		case unix.ENOBUFS:
			q.overrun()
			return nil
		case unix.EBADF, unix.ENOTSOCK:
			return fmt.Errorf("nfq: queue %d: receive: %w", q.cfg.Queue, errno)
		}
		q.stats.errors.Add(1)
		if q.failures++; q.failures == maxFailures {
			return q.quit(fmt.Errorf("nfq: queue %d: receive failed %d times in a row: %w", q.cfg.Queue, q.failures, errno))
		}
		return nil
	}
	q.failures = 0
	now := q.now()
	b := q.b
	for i := 0; i < n; i++ {
		d := q.bufs[i][:q.mmsgs[i].len]
		for len(d) > 0 {
			d = d[b.addDatagram(d):]
			if b.full() {
				if err := q.answer(q.fn, now); err != nil {
					return err
				}
			}
		}
	}
	if len(b.pkts) > 0 {
		if err := q.answer(q.fn, now); err != nil {
			return err
		}
	}
	if b.nlErrors != q.seenNlError {
		q.stats.errors.Add(b.nlErrors - q.seenNlError)
		q.seenNlError = b.nlErrors
	}
	if b.lost != q.seenLost {
		q.stats.lost.Add(b.lost - q.seenLost)
		q.seenLost = b.lost
	}
	return nil
}

// Why Run waits in the netpoller.
//
// Run waits for the socket in the runtime's netpoller, as the C consumer
// waits in poll(2): the goroutine parks, its thread sleeps in epoll_wait
// holding no P, and with every P idle the runtime's system monitor
// (sysmon) sleeps until something happens. A packet wakes that thread,
// which runs the goroutine again (it is not locked to a thread: a locked
// one would be handed between two threads at every wait). The reads and
// the verdict write do not wait (the socket is non-blocking; a write to the
// kernel is processed in the call), so they are raw system calls, without
// the runtime's bookkeeping for calls that may block. TestIdleRunParks
// checks that an idle Run is parked, not in a system call nor running.
//
// A goroutine blocked in a system call would keep its P, so sysmon would
// never sleep for long and take the P back again and again; the blocking
// designs this replaced and what they cost (CPU per packet against the C
// consumer, sudo PARTS=moderate ./scripts/bench.sh) are in docs/design.md,
// "Moderate load: CPU per packet in small batches".

// startPoll makes the socket non-blocking and registers it with the
// runtime's netpoller as q.sock (from then on q.sock owns q.fd); it puts it
// and the hold timer in an epoll instance of their own and registers that
// too, as q.file.
func (q *Queue) startPoll() error {
	if err := unix.SetNonblock(q.fd, true); err != nil {
		return fmt.Errorf("non-blocking socket: %w", err)
	}
	q.sock = os.NewFile(uintptr(q.fd), "nfqueue")
	// Only a file in the netpoller takes deadlines: this fails if the
	// socket could not be added to it.
	if err := q.sock.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("netpoller: %w", err)
	}
	rc, err := q.sock.SyscallConn()
	if err != nil {
		return fmt.Errorf("netpoller: %w", err)
	}
	q.sockRC = rc
	// The netpoller's own timers wake it to the millisecond at best
	// (epoll_wait's timeout): too coarse to give held packets their
	// verdicts on time. A timerfd is as precise as the kernel's timers,
	// and an epoll instance holding it and the socket lets Run wait for
	// either in one netpoller wait (the runtime's epoll is told when this
	// one has an event).
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("timerfd: %w", err)
	}
	q.tfd = tfd
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, tfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(tfd)}); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("epoll: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("epoll: %w", err)
	}
	q.epfd = epfd
	q.file = os.NewFile(uintptr(epfd), "nfqueue-hold")
	if err := q.file.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("netpoller: %w", err)
	}
	if q.rc, err = q.file.SyscallConn(); err != nil {
		return fmt.Errorf("netpoller: %w", err)
	}
	q.serveFn = q.serve
	q.polled.Store(&[2]*os.File{q.sock, q.file}) // for Wake, from other goroutines
	return nil
}

// setSockInSet adds the socket to the epoll set Run waits on while packets
// are held, or takes it out. A socket added with packets already waiting
// makes the set readable at once.
func (q *Queue) setSockInSet(in bool) {
	op := unix.EPOLL_CTL_DEL
	if in {
		op = unix.EPOLL_CTL_ADD
	}
	if err := unix.EpollCtl(q.epfd, op, q.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(q.fd)}); err != nil {
		q.stats.errors.Add(1)
		return
	}
	q.sockInSet = in
}

// recvmmsg reads up to BatchSize datagrams without waiting: what the
// socket holds, or EAGAIN if it is empty.
func (q *Queue) recvmmsg() (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(q.fd),
		uintptr(unsafe.Pointer(&q.mmsgs[0])), uintptr(len(q.mmsgs)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// overrun counts an ENOBUFS and logs, at most once per enobufsLogEvery.
func (q *Queue) overrun() {
	q.stats.enobufs.Add(1)
	q.unlogged++
	if q.cfg.Logf == nil {
		return
	}
	now := q.now() // monotonic: a wall-clock step back would silence it
	if q.lastLog != 0 && now-q.lastLog < enobufsLogEvery {
		return
	}
	verdict := "accepted"
	if q.cfg.FailClosed {
		verdict = "dropped"
	}
	q.cfg.Logf("nfq: queue %d: socket receive buffer overrun (ENOBUFS) %d time(s) since last report: packets were %s by the kernel without being shaped (the receive buffer is too small for the load or the queue length)",
		q.cfg.Queue, q.unlogged, verdict)
	q.lastLog = now
	q.unlogged = 0
}
