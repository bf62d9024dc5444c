package nfq

// Why not go-nfqueue's receive loop.
//
// github.com/florianl/go-nfqueue/v2 (v2.1.0) reads through mdlayher/netlink:
// every message is copied into freshly allocated netlink.Message values, its
// attributes are unmarshalled into a new Attribute struct with pointer
// fields and a whole-packet copy, and each SetVerdict builds a new message,
// sends it and goes back through the runtime netpoller: several times the
// CPU per packet of libnetfilter_queue, and its queue overflows first
// (figures from sudo PARTS=live ./scripts/bench.sh in docs/design.md, "nfq:
// performance of the live path"). One command compares it with this file's
// loop in one run (root):
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
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// recvTimeout bounds each blocking read of Open's configuration requests.
// Run does not read blocking: it waits in the netpoller, and a
// cancellation wakes it at once.
const recvTimeout = 100 * time.Millisecond

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
	// owners: the kernel sends each packet's socket owner
	// (NFQA_CFG_F_UID_GID took).
	owners bool
	// conntrack: the kernel sends each packet's connection state
	// (NFQA_CFG_F_CONNTRACK took).
	conntrack bool

	// proc is the kernel's queue table, opened in the queue's namespace
	// by Open (nil if that failed: then KernelStats reads it from the
	// calling thread's namespace).
	proc *QueueTable
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
	// spinShare: spinning takes at most 1/spinShare of a CPU (see
	// spinRoom): defaultSpinShare, which only a benchmark changes.
	spinShare atomic.Int64
	// writer sends messages to the kernel: writeSys. A test wraps it (a
	// write made to fail, timed) with an option (options_linux_test.go);
	// the production path calls it and checks nothing.
	writer func(b []byte) error
	// wallNs is the wall clock read at Run's start as ns since the Unix
	// epoch, the engine clock's base: time.Time.UnixNano. A test replaces
	// it to make the engine's clock differ from time.Now(), as after a
	// wall-clock step.
	wallNs func(time.Time) int64
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
	if err := cfg.checkMaxHeld(); err != nil {
		return nil, err
	}
	// The socket, and the /proc file read to explain an error, belong to
	// the thread's network namespace: stay on one thread meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkNetfilter)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("nfq: queue %d: %w: the kernel has no nfnetlink (%w)", cfg.Queue, ErrNoSupport, err)
		}
		return nil, fmt.Errorf("nfq: queue %d: netlink socket: %w", cfg.Queue, err)
	}
	q := &Queue{cfg: cfg, fd: fd, unbound: true, epfd: -1, tfd: -1, wakeEst: wakeEstStart, latency: newLatencyHist(), late: newLatencyHist()}
	q.spinShare.Store(defaultSpinShare)
	q.writer, q.wallNs = q.writeSys, time.Time.UnixNano
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
		owners:    true,
		conntrack: cfg.Conntrack,
		ack:       true,
	}
	// A kernel that lacks a flag (NFQA_CFG_F_UID_GID before 3.19;
	// NFQA_CFG_F_CONNTRACK built without CONFIG_NETFILTER_NETLINK_GLUE_CT,
	// or without ctnetlink, which it loads on demand where it can) refuses the whole message, before binding:
	// bind without the flags it refuses, one log line each. Packets then
	// have no owner (uid and gid keys see one "no owner" flow, uid and gid
	// matches match nothing) or no connection state (ct-state matches
	// hold for limit and drop rules, not accept rules).
	var refusal error
	for _, try := range []struct{ owners, conntrack bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		if try.conntrack && !cfg.Conntrack {
			continue
		}
		msg.owners, msg.conntrack = try.owners, try.conntrack
		err = q.request(msg)
		if err == nil || !(errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			break
		}
		if refusal == nil {
			refusal = err
		}
	}
	if err == nil {
		q.owners, q.conntrack = msg.owners, msg.conntrack
		if cfg.Logf != nil && !msg.owners {
			cfg.Logf("nfq: queue %d: the kernel does not send packets' socket owners (NFQA_CFG_F_UID_GID: %v): uid and gid keys see every packet as \"no owner\", and uid and gid matches match none", cfg.Queue, refusal)
		}
		if cfg.Logf != nil && cfg.Conntrack && !msg.conntrack {
			cfg.Logf("nfq: queue %d: the kernel does not send packets' connection state (NFQA_CFG_F_CONNTRACK: %v: a kernel built without CONFIG_NETFILTER_NETLINK_GLUE_CT, or without nf_conntrack_netlink): ct-state matches hold for every queued packet of limit and drop rules and for none of accept rules; divert rules from packetshaper-rules add --policy queue only the states the policy needs", cfg.Queue, refusal)
		}
	} else if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		// Refused with and without the flags: the first answer.
		err = refusal
	}
	if err != nil {
		return fail(q.explain(err))
	}
	q.unbound = false
	// Opened while the thread is in the queue's namespace, so that
	// KernelStats and the final read in Run work from any thread.
	q.proc, _ = OpenQueueTable()
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
		return fmt.Errorf("nfq: queue %d: %w (load it: modprobe nfnetlink_queue): %w", n, ErrNoSupport, err)
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

// Latency returns the verdict latencies measured so far (Config.Latency).
// It is safe to call concurrently with Run.
func (q *Queue) Latency() LatencyStats { return q.latency.stats() }

// LatencyHistogram returns the verdict latencies measured so far
// (Config.Latency) as a cumulative histogram over bounds, which must be
// ascending. It is safe to call concurrently with Run.
func (q *Queue) LatencyHistogram(bounds []time.Duration) LatencyHistogram {
	return q.latency.histogram(bounds)
}

// Config returns the queue's configuration, with the defaults Open filled
// in.
func (q *Queue) Config() Config { return q.cfg }

// Bound reports whether the queue is still bound: false once it has been
// unbound (Run returned, or Close). For Run's goroutine, or before Run.
func (q *Queue) Bound() bool { return !q.unbound }

// LateHistogram returns how late held packets got their verdicts
// (HoldStats.Late) as a cumulative histogram over bounds, which must be
// ascending. It is safe to call concurrently with Run.
func (q *Queue) LateHistogram(bounds []time.Duration) LatencyHistogram {
	return q.late.histogram(bounds)
}

// PortID is the netlink port of the queue's socket: the kernel's table of
// queues (KernelStats) names it for a queue bound by this Queue.
func (q *Queue) PortID() uint32 { return q.portID }

// Owners reports whether the kernel sends each packet's socket owner
// (Packet.UID, GID and HasOwner): false on a kernel that refused
// NFQA_CFG_F_UID_GID, which Open logged through Config.Logf.
func (q *Queue) Owners() bool { return q.owners }

// Conntrack reports whether the kernel sends each packet's connection
// tracking state (Packet.CtInfo and HasCt): false on a kernel that refused
// NFQA_CFG_F_CONNTRACK, which Open logged through Config.Logf.
func (q *Queue) Conntrack() bool { return q.conntrack }

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
	p, err := OpenQueueTable()
	if err != nil {
		return KernelStats{}, err
	}
	defer p.Close()
	return p.stats(queue)
}
