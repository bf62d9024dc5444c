package nfq

// Why not go-nfqueue's receive loop.
//
// github.com/florianl/go-nfqueue/v2 (v2.1.0) reads through mdlayher/netlink:
// every message is copied into freshly allocated netlink.Message values, its
// attributes are unmarshalled into a new Attribute struct with pointer
// fields and a whole-packet copy, and each SetVerdict builds a new message,
// sends it and goes back through the runtime netpoller. Profiled under load
// (docs/design.md, "nfq: performance of the live path") that is ~22 µs of
// CPU per packet against ~6 µs for libnetfilter_queue, and the queue
// overflows at 45k packets/s. One command
// compares it with this file's loop in one run (root):
//
//	go test ./nfq -run '^$' -bench Consumers -benchmem -benchtime 100000x -count 3
//
// So this file talks to the kernel itself with golang.org/x/sys/unix:
// non-blocking recvmmsg into buffers allocated once, messages parsed in
// place (wire.go), one write of NFQNL_MSG_VERDICT_BATCH messages per batch,
// and, when the socket is empty, a wait in the runtime's netpoller (see
// Run). Setup is a single NFQNL_MSG_CONFIG message, so go-nfqueue would add
// nothing there either. BenchmarkConsumers (baseline_linux_test.go) runs
// go-nfqueue's naive consumer beside this loop on one setup, in one run.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// idleEvery is how often Run calls Config.Idle (also while packets flow:
// the wait for them is what it bounds).
const idleEvery = 100 * time.Millisecond

// recvTimeout bounds each blocking read of Open's configuration requests.
// Run does not read blocking: it waits in the netpoller, and a
// cancellation wakes it at once.
const recvTimeout = 100 * time.Millisecond

// maxFailures is how many unexpected receive errors in a row make Run give
// up instead of spinning on a broken socket.
const maxFailures = 1000

// recvHeadroom is room in each receive buffer for the netlink, nfgenmsg and
// attribute headers around the copied bytes of the packet.
const recvHeadroom = 1024

// mmsghdr is struct mmsghdr (x/sys/unix has no Go type for it).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// Queue is one bound NFQUEUE queue. It is created by Open, read by Run and
// released by Close. Stats and KernelStats may be called from any goroutine;
// the rest is for one goroutine at a time.
type Queue struct {
	cfg    Config
	fd     int
	portID uint32

	running   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	unbound   bool

	// proc is the kernel's queue table, opened in the queue's namespace
	// by Open (nil if that failed: then KernelStats reads it from the
	// calling thread's namespace).
	proc *procFile
	// final holds the kernel's counters read just before the queue was
	// unbound; nil until then.
	final atomic.Pointer[KernelStats]

	// stop hooks (see onStop), run once by stopping.
	hookMu    sync.Mutex
	hooks     []func()
	hooksDone bool

	// receive state, used only by Run's goroutine
	b     *batch
	bufs  [][]byte
	iovs  []unix.Iovec
	mmsgs []mmsghdr

	// Run waits in the runtime's netpoller on sock, the socket (it then
	// owns fd), or while packets are held on file, an epoll instance of
	// its own (epfd) that holds the socket and the hold timer (tfd), so
	// that either wakes it (waitHeld); Close closes them. nil before Run.
	sock     *os.File
	sockRC   syscall.RawConn
	file     *os.File
	rc       syscall.RawConn
	serveFn  func(fd uintptr) bool // q.serve, made once so that waiting allocates nothing
	epfd     int
	tfd      int // timerfd (CLOCK_MONOTONIC), -1 before Run
	waitHeld bool
	// sockInSet: the socket is in the epoll set now. It is there only
	// while Run waits on the set: in it for good, each packet's arrival
	// would wake the runtime's epoll twice (the socket, and the set).
	sockInSet bool

	// Held packets (Verdict.At), Run's goroutine only. armed is the
	// departure the timer is set for (0: disarmed), fire when it fires
	// (spinAhead before it); wakeEst estimates how late its wake-ups come
	// (see spinAhead). monoBase is CLOCK_MONOTONIC at the engine clock's
	// base, to set it. halting: Run is stopping, every verdict is given at
	// once.
	hold    holdHeap
	rel     []heldPkt // the packets being released, sorted by id
	armed   int64
	fire    int64
	wakeEst int64
	// Spinning is budgeted: spinTokens ns of it may be spent now,
	// refilled at 1/spinShare of the time passed since spinLast.
	spinTokens, spinLast int64
	monoBase             int64
	halting              bool
	late                 latencyHist
	holdCnt              struct{ held, peak, total, released, full atomic.Uint64 }
	// timeWrites (tests) adds up the time spent in verdict writes.
	timeWrites bool
	writeNs    atomic.Int64
	// writeHook (tests), if not nil, is called with every message write
	// before it is made; an error it returns fails the write.
	writeHook func(b []byte) error
	// wallClock (tests), if not nil, replaces the wall clock (ns since the
	// Unix epoch) read at Run's start to set the engine's clock: a test
	// makes the engine's clock differ from time.Now(), as after a
	// wall-clock step.
	wallClock func() int64
	// intakeClosed: the kernel queue's length has been set to 0.
	intakeClosed bool

	// Run's state, for serve
	fn       Handler
	done     <-chan struct{}
	base     time.Time
	baseNs   int64
	drained  bool  // the last read emptied the socket: wait before reading again
	failures int   // unexpected receive errors in a row
	runErr   error // why serve gave up

	lastLog     int64  // when ENOBUFS was last logged (ns)
	unlogged    uint64 // ENOBUFS not yet logged
	seenNlError uint64 // b.nlErrors already counted into stats
	seenLost    uint64 // b.lost already counted into stats

	latency latencyHist

	// wake asks Run to call Idle (Wake); polled is q.sock and q.file once
	// Run has put them in the netpoller, for Wake on other goroutines.
	wake   atomic.Bool
	polled atomic.Pointer[[2]*os.File]

	stats struct {
		packets, accepted, dropped, batches, verdictMsgs, enobufs, lost, errors, stopAccepted atomic.Uint64
	}
}

// Open binds NFQUEUE queue c.Queue in the calling goroutine's network
// namespace and configures it (copy range, queue length, fail-open). Errors
// are one line, starting with "nfq:", and wrap ErrPermission, ErrBusy or
// ErrNoSupport where one of them is the cause. Open does not modify c.
func Open(c Config) (*Queue, error) {
	cfg := c.withDefaults()
	if p := cfg.RealtimePriority; p < 0 || p > MaxRealtimePriority {
		return nil, fmt.Errorf("nfq: queue %d: real-time priority %d out of range (1..%d, or 0 for none)", cfg.Queue, p, MaxRealtimePriority)
	}
	if err := cfg.checkMaxHeld(); err != nil {
		return nil, err
	}
	// The socket, and the /proc file read to explain an error, belong to
	// the thread's network namespace: stay on one thread meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if cfg.RealtimePriority > 0 {
		if err := setProcessRealtime(cfg.RealtimePriority); err != nil {
			return nil, fmt.Errorf("nfq: queue %d: %w", cfg.Queue, err)
		}
	}

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkNetfilter)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("nfq: queue %d: %w: the kernel has no nfnetlink (%v)", cfg.Queue, ErrNoSupport, err)
		}
		return nil, fmt.Errorf("nfq: queue %d: netlink socket: %w", cfg.Queue, err)
	}
	q := &Queue{cfg: cfg, fd: fd, unbound: true, epfd: -1, tfd: -1, wakeEst: wakeEstStart}
	fail := func(err error) (*Queue, error) {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail(fmt.Errorf("nfq: queue %d: bind netlink socket: %w", cfg.Queue, err))
	}
	if sa, err := unix.Getsockname(fd); err == nil {
		if nl, ok := sa.(*unix.SockaddrNetlink); ok {
			q.portID = nl.Pid
		}
	}
	// A big receive buffer: SO_RCVBUFFORCE ignores net.core.rmem_max but
	// needs CAP_NET_ADMIN; without it the bind below fails anyway and says so.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.ReadBuffer); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.ReadBuffer)
	}
	// NETLINK_NO_ENOBUFS is deliberately not set: an overrun then shows
	// up as one ENOBUFS from the next read, which Run counts and logs.
	if cfg.Latency {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMP, 1); err != nil {
			return fail(fmt.Errorf("nfq: queue %d: SO_TIMESTAMP: %w", cfg.Queue, err))
		}
	}
	tv := unix.NsecToTimeval(int64(recvTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail(fmt.Errorf("nfq: queue %d: SO_RCVTIMEO: %w", cfg.Queue, err))
	}

	q.b = newBatch(cfg.Queue, cfg.BatchSize)
	// One write carries a batch's verdicts and every held packet's.
	q.b.out = make([]byte, 0, (cfg.BatchSize+cfg.MaxHeld)*maxVerdictMsgLen)
	q.hold = newHoldHeap(cfg.MaxHeld)
	q.rel = make([]heldPkt, 0, cfg.MaxHeld)
	// A netlink write larger than the send buffer fails (EMSGSIZE).
	if need := 2 * cap(q.b.out); need > 1<<17 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, need); err != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, need)
		}
	}
	q.bufs = make([][]byte, cfg.BatchSize)
	q.iovs = make([]unix.Iovec, cfg.BatchSize)
	q.mmsgs = make([]mmsghdr, cfg.BatchSize)
	for i := range q.bufs {
		q.bufs[i] = make([]byte, int(cfg.CopyRange)+recvHeadroom)
		q.iovs[i].Base = &q.bufs[i][0]
		q.iovs[i].SetLen(len(q.bufs[i]))
		q.mmsgs[i].hdr.Iov = &q.iovs[i]
		q.mmsgs[i].hdr.SetIovlen(1)
	}

	// Bind and configure in one message, so that the queue never exists
	// with the kernel's defaults (no copy, 1024 packets, fail-closed).
	msg := configMsg{
		cmd:       nfqnlCfgCmdBind,
		params:    true,
		copyRange: cfg.CopyRange,
		maxLen:    true,
		queueLen:  cfg.MaxQueueLen,
		flags:     true,
		failOpen:  !cfg.FailClosed,
		ack:       true,
	}
	if err := q.request(msg); err != nil {
		return fail(q.explain(err))
	}
	q.unbound = false
	// Opened while the thread is in the queue's namespace, so that
	// KernelStats and the final read in Run work from any thread.
	q.proc, _ = openProc()
	return q, nil
}

// explain turns the kernel's answer to the bind request into a one-line error.
func (q *Queue) explain(err error) error {
	n := q.cfg.Queue
	switch {
	case errors.Is(err, unix.EPERM):
		// The kernel says EPERM both without CAP_NET_ADMIN and when
		// another socket holds the queue; /proc tells them apart.
		if ks, kerr := readKernelStats(n); kerr == nil && ks.PortID != q.portID {
			return fmt.Errorf("nfq: queue %d: %w by another process (netlink port %d); stop it or pick another --queue", n, ErrBusy, ks.PortID)
		}
		return fmt.Errorf("nfq: queue %d: %w: binding an NFQUEUE queue needs root (CAP_NET_ADMIN)", n, ErrPermission)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOENT):
		return fmt.Errorf("nfq: queue %d: %w (load it: modprobe nfnetlink_queue): %v", n, ErrNoSupport, err)
	}
	return fmt.Errorf("nfq: queue %d: configure: %w", n, err)
}

// request sends a configuration message and waits for the kernel's
// acknowledgement. Packets that arrive meanwhile (the queue is bound as
// soon as the bind is processed) are accepted at once, so none is stranded.
func (q *Queue) request(m configMsg) error {
	q.b.seq++
	seq := q.b.seq
	buf := m.append(make([]byte, 0, 64), q.cfg.Queue, seq)
	if _, err := unix.Write(q.fd, buf); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	rb := make([]byte, int(q.cfg.CopyRange)+recvHeadroom)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(q.fd, rb, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return err
		}
		d := rb[:n]
		for len(d) >= nlmsgHdrLen {
			mlen := int(le.Uint32(d))
			if mlen < nlmsgHdrLen || mlen > len(d) {
				break
			}
			typ, mseq := le.Uint16(d[4:]), le.Uint32(d[8:])
			body := d[nlmsgHdrLen:mlen]
			switch {
			case typ == nlmsgError && mseq == seq && len(body) >= 4:
				if e := int32(le.Uint32(body)); e != 0 {
					return unix.Errno(-e)
				}
				return nil
			case typ == nfqnlMsgPacket && len(body) >= nfgenHdrLen:
				var p Packet
				if parsePacket(body[nfgenHdrLen:], &p) {
					q.b.seen(p.ID)
					var vb [maxVerdictMsgLen]byte
					n := putVerdict(vb[:], q.cfg.Queue, p.ID, Verdict{}, false, 0)
					_, _ = unix.Write(q.fd, vb[:n])
					q.stats.packets.Add(1)
					q.stats.accepted.Add(1)
				}
			}
			d = d[min(align4(mlen), len(d)):]
		}
	}
	return unix.ETIMEDOUT
}

// Run reads packets and answers them until ctx is cancelled, calling fn for
// each batch from Run's goroutine. Batches are read with one recvmmsg and
// answered with one write, as soon as the socket has no more to give or
// BatchSize packets have been read; the clock is read once per batch. When
// the socket is empty, Run's goroutine waits in the runtime's netpoller,
// like a net.Conn read, and holds no thread. A packet whose verdict has At
// is held and answered at At, in the write of the batch then at hand or
// alone, Run waking for it (see hold.go).
//
// When ctx is cancelled, Run lets a Monitor of the queue take its last
// reading; sets the kernel queue's length to 0, so that new packets bypass
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
	q.baseNs = q.base.UnixNano()
	if q.wallClock != nil {
		q.baseNs = q.wallClock()
	}
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

// stop closes the kernel queue's intake (not with FailClosed: see Run),
// gives the held packets their verdicts and answers what is still in the
// socket, for at most stopDrainTimeout, then unbinds the queue, which
// answers what is left.
func (q *Queue) stop() error {
	// The engine's clock, like every deadline of Run's: it follows the
	// monotonic clock, so a wall-clock step cannot end the drain at once
	// (a step back) or make it last (a step forward).
	stopBy := q.now() + int64(stopDrainTimeout)
	q.stopping() // a Monitor's last reading, while the queue takes packets
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

// setProcessRealtime puts every thread of the process under SCHED_FIFO at
// priority prio; threads the runtime starts later inherit it from the
// thread that creates them. The error is one line and wraps ErrPermission
// when the kernel refuses.
//
// The whole process, not only the reader thread: a Go thread does not run
// alone. Right after a read returns, the reader may have to wait for
// another thread of the runtime (a GC worker scanning its stack, the thread
// holding its P), and the runtime waits for it by spinning with
// sched_yield. A real-time thread that yields gives its CPU only to threads
// of its own priority, so with the reader alone at SCHED_FIFO and the other
// thread on the same CPU, the reader spins until the kernel's real-time
// throttling stops it: measured once, 0.95 s stalls, with a design not kept
// and so without a benchmark in the tree (docs/design.md). With
// every thread at the same priority, a yield lets the other one run.
func setProcessRealtime(prio int) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("real-time priority %d: %w: SCHED_FIFO needs root or CAP_SYS_NICE (or RLIMIT_RTPRIO >= %d)", prio, ErrPermission, prio)
		}
		return fmt.Errorf("real-time priority %d: sched_setattr(SCHED_FIFO): %w", prio, err)
	}
	// Threads started while the list is read are found by the next pass.
	done := map[int]bool{}
	for pass := 0; pass < 5; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("real-time priority %d: %w", prio, err)
		}
		changed := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			done[tid], changed = true, true
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("real-time priority %d: thread %d: sched_setattr(SCHED_FIFO): %w", prio, tid, err)
			}
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// Why Run waits in the netpoller.
//
// Run used to block in recvmmsg (MSG_WAITFORONE, SO_RCVTIMEO 100 ms) on a
// locked thread, through syscall.Syscall6. At moderate load (20k packets/s
// in batches of a few packets) that cost about twice the CPU per packet of
// the C consumer (docs/design.md, "Moderate load"; the current loop
// against the C consumer: sudo PARTS=moderate ./scripts/bench.sh; the
// blocking loop was measured once, before it went), and half of it was
// the runtime's system monitor (sysmon), not the reader. A goroutine
// blocked in a system call keeps its P, so sysmon never sleeps for long; it
// takes the P after 20 µs of a call when no other P is idle (GOMAXPROCS=1,
// e.g. a consumer pinned to one core), and, as of Go 1.26, in any case at
// the first call after 10 ms without the goroutine being rescheduled (a
// reader that never parks is never rescheduled). Each time, the return from
// the call takes the slow path, and sysmon goes back to polling every
// 20 µs for a millisecond or more: thousands of wake-ups a second, several
// futex calls per batch (strace).
//
// Waiting in the netpoller instead, as the C consumer waits in poll(2): the
// goroutine parks, its thread sleeps in epoll_wait holding no P, and with
// every P idle sysmon sleeps until something happens. A packet wakes that
// thread, which runs the goroutine again (it is not locked to a thread: a
// locked one would be handed between two threads at every wait). The reads
// and the verdict write do not wait (the socket is non-blocking; a write
// to the kernel is processed in the call), so they are raw system calls,
// without the runtime's bookkeeping for calls that may block.
//
// Blocking in recvmmsg through RawSyscall6 was measured too, once (a design
// not kept, so no benchmark in the tree): about as cheap per batch, but the
// runtime then sees the goroutine always running, so sysmon never sleeps
// and preempts it with a signal every 10 ms (5-6 ms of CPU a second with no
// traffic; the C consumer 0.5), a stop-the-world waits for that signal, and
// each queue holds a P for good, which starves the process's other
// goroutines when there are as many queues as Ps.

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
// run the goroutine: on an idle virtual CPU that is tens of microseconds,
// measured 80 µs at the median on the CI machine (a Firecracker VM;
// BenchmarkHoldLateness gives the lateness with and without the early wake
// and spin), more
// than the verdict itself. So the timer is set to fire that long before the
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

// spinShare: spinning takes at most 1/spinShare of a CPU (a variable for
// the benchmark that compares without it).
var spinShare atomic.Int64

func init() { spinShare.Store(20) }

// spinRoom is how long Run may spin now (see spinShare).
func (q *Queue) spinRoom(now int64) int64 {
	if now > q.spinLast {
		q.spinTokens = min(q.spinTokens+(now-q.spinLast)/spinShare.Load(), spinBurst)
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

// write sends verdict messages; the kernel processes them before write
// returns, without waiting for anything but memory, so it is a raw system
// call (see "Why Run waits in the netpoller").
func (q *Queue) write(b []byte) error {
	if q.timeWrites {
		defer func(t0 time.Time) { q.writeNs.Add(int64(time.Since(t0))) }(time.Now())
	}
	if q.writeHook != nil {
		if err := q.writeHook(b); err != nil {
			return err
		}
	}
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
		return fmt.Errorf("%w; %v", err, uerr)
	}
	return err
}

// onStop registers fn to be called once, when the queue starts to stop
// (Run's context cancelled, Run failing, or Close): from that goroutine,
// while the queue is still bound and before it stops taking packets. It
// reports false if the queue has already stopped.
func (q *Queue) onStop(fn func()) bool {
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
			q.proc.close()
		}
		if uerr != nil {
			q.closeErr = uerr
		}
	})
	return q.closeErr
}

// Latency returns the verdict latencies measured so far (Config.Latency).
// It is safe to call concurrently with Run.
func (q *Queue) Latency() LatencyStats { return q.latency.stats() }

// LatencyHistogram returns the verdict latencies measured so far
// (Config.Latency) as a cumulative histogram over bounds, which must be
// ascending. It is safe to call concurrently with Run.
func (q *Queue) LatencyHistogram(bounds []time.Duration) LatencyHistogram {
	return q.latency.histogram(bounds)
}

// LateHistogram returns how late held packets got their verdicts
// (HoldStats.Late) as a cumulative histogram over bounds, which must be
// ascending. It is safe to call concurrently with Run.
func (q *Queue) LateHistogram(bounds []time.Duration) LatencyHistogram {
	return q.late.histogram(bounds)
}

// PortID is the netlink port of the queue's socket: the kernel's table of
// queues (KernelStats) names it for a queue bound by this Queue.
func (q *Queue) PortID() uint32 { return q.portID }

// Wake makes Run call Config.Idle soon, from any goroutine: at once if Run
// is waiting for packets (the wait is ended), else as soon as the current
// batches are answered. Wake-ups made before Idle runs are answered
// by one call. For a Handler with work to do between batches (copying out
// flows for a listing) that should wait neither for traffic nor for the
// receive timeout. Without Config.Idle it does nothing.
//
// Run's wait in the netpoller is ended by a read deadline in the past; Run
// looks at the wake-up again after setting its next deadline, so none is
// lost.
func (q *Queue) Wake() {
	q.wake.Store(true)
	if fs := q.polled.Load(); q.cfg.Idle != nil && fs != nil {
		// Ends Run's wait in the netpoller at once (as a cancellation
		// does), on the socket or the hold set, whichever it waits on;
		// Run sets its next deadline after looking at wake.
		for _, f := range fs {
			f.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// Stats returns the queue's counters. It is safe to call concurrently with Run.
func (q *Queue) Stats() Stats {
	return Stats{
		Packets:     q.stats.packets.Load(),
		Accepted:    q.stats.accepted.Load(),
		Dropped:     q.stats.dropped.Load(),
		Batches:     q.stats.batches.Load(),
		VerdictMsgs: q.stats.verdictMsgs.Load(),
		ENOBUFS:     q.stats.enobufs.Load(),
		Lost:        q.stats.lost.Load(),
		Errors:      q.stats.errors.Load(),

		StopAccepted: q.stats.stopAccepted.Load(),
	}
}

// KernelStats reads the kernel's counters for this queue, from any
// goroutine (the file is opened in the queue's namespace by Open). Once the
// queue has been unbound (Run returned, or Close), it returns the counters
// read just before the unbind, with a nil error: the final values, which
// the kernel forgets with the queue. It is safe to call concurrently with
// Run.
func (q *Queue) KernelStats() (KernelStats, error) {
	if ks := q.final.Load(); ks != nil {
		return *ks, nil
	}
	return q.readKernel()
}

// readKernel reads the queue's live counters.
func (q *Queue) readKernel() (KernelStats, error) {
	if q.proc != nil {
		return q.proc.stats(q.cfg.Queue)
	}
	return readKernelStats(q.cfg.Queue)
}

func readKernelStats(queue uint16) (KernelStats, error) {
	p, err := openProc()
	if err != nil {
		return KernelStats{}, err
	}
	defer p.close()
	return p.stats(queue)
}
