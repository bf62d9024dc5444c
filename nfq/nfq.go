// Package nfq receives packets from a Linux NFQUEUE queue and sends their
// verdicts back, in batches, without allocating per packet.
//
// It is the only package of packetshaper that speaks nfnetlink_queue (its
// own netlink socket, golang.org/x/sys/unix only); the nf_tables netlink
// is spoken by failopen (reading rule counters) and offload (set
// elements). It knows nothing about flows or limiters: a Handler gets a
// batch of packets and the time the batch was read, and fills in one
// Verdict per packet.
//
//	q, err := nfq.Open(nfq.Config{Queue: 0})
//	if err != nil { ... }           // one-line error: permission, busy queue, missing module
//	defer q.Close()
//	err = q.Run(ctx, func(b []nfq.Packet, v []nfq.Verdict, now int64) { ... })
//
// One Queue is read by one goroutine at a time (Run's: it waits in the
// runtime's netpoller, on no thread of its own); use one Queue per NFQUEUE
// number and let the kernel's --queue-balance spread flows over them.
// Nothing is shared between queues, so nothing is locked.
//
// Overload is counted beside the queues, not in them: a packet that finds
// its queue full passes without a verdict (fail-open) and the kernel counts
// it nowhere. Package failopen counts those packets per queue, from the
// kernel's table of queues (QueueTable) and the counters of the rules that
// queue them; a Queue lets it take its last reading as it stops (OnStop).
//
// The files follow the package's jobs: nfq.go the types, wire.go the
// messages, queue_linux.go the socket's setup and bind, run_linux.go the
// receive loop, verdict_linux.go the verdict writes, hold.go and
// hold_linux.go the hold scheduler (Verdict.At), stop_linux.go the stop,
// drain and unbind, proc*.go the kernel's table of queues.
package nfq

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/packetshaper/packetshaper/internal/hist"
)

// Defaults for the zero fields of Config.
const (
	// DefaultMaxQueueLen is the kernel queue length used when
	// Config.MaxQueueLen is 0 (the kernel's own default is 1024, which a
	// 100k packets/s burst fills in 10 ms).
	DefaultMaxQueueLen = 8192
	// DefaultCopyRange is the number of bytes of each packet copied to user
	// space when Config.CopyRange is 0: enough for an IPv4 or IPv6 header,
	// a few extension headers and a TCP header with options. The packet's
	// full length is in its IP header and in Packet.Len either way.
	DefaultCopyRange = 256
	// DefaultReadBuffer is the socket receive buffer used when
	// Config.ReadBuffer is 0. It holds about DefaultMaxQueueLen messages of
	// DefaultCopyRange bytes several times over, so with the default queue
	// length the queue, not the socket, is what fills first.
	DefaultReadBuffer = 32 << 20
	// DefaultBatchSize is the most packets read (one recvmmsg call) and
	// answered (one write) at a time when Config.BatchSize is 0.
	DefaultBatchSize = 64
	// MaxCopyRange is the largest copy range the kernel accepts.
	MaxCopyRange = 0xffff
	// DefaultMaxHeld is the most packets held at once (Verdict.At) when
	// Config.MaxHeld is 0, or a quarter of MaxQueueLen if that is less.
	// Held packets sit at the head of the kernel's queue, and on kernels
	// without a hash table of queued packets each verdict given by id
	// walks past them: docs/design.md ("Holding packets") measures
	// that cost against the number held, which sets this default.
	DefaultMaxHeld = 1024
	// MaxMaxHeld bounds Config.MaxHeld.
	MaxMaxHeld = 16384
)

// Config configures a queue. The zero value binds queue 0 with the
// documented defaults; Open never modifies the Config it is given.
type Config struct {
	// Queue is the NFQUEUE number, as in `--queue-num N` or `queue num N`.
	Queue uint16
	// MaxQueueLen is the most packets the kernel holds for this queue
	// waiting for a verdict; 0 means DefaultMaxQueueLen. When it is full
	// the kernel accepts new packets without asking (fail-open: package failopen
	// counts them), or drops them if FailClosed is set.
	MaxQueueLen uint32
	// CopyRange is the number of bytes of each packet copied to user
	// space, from the start of the IP header; 0 means DefaultCopyRange,
	// and values above MaxCopyRange are clamped to it.
	CopyRange uint32
	// FailClosed makes the kernel drop packets that find the queue full
	// instead of accepting them. The default (false) sets the kernel's
	// NFQA_CFG_F_FAIL_OPEN flag: a slow or stopped shaper never cuts the
	// network.
	FailClosed bool
	// ReadBuffer is the netlink socket's receive buffer in bytes, set with
	// SO_RCVBUFFORCE (SO_RCVBUF, capped by net.core.rmem_max, if that is
	// refused); 0 means DefaultReadBuffer.
	ReadBuffer int
	// BatchSize is the most packets handed to the Handler at once; 0 means
	// DefaultBatchSize. A batch is whatever the socket holds when it is
	// read, up to BatchSize: packets never wait for a batch to fill.
	BatchSize int
	// Latency makes Run measure each packet's verdict latency: the time
	// from the kernel timestamping the packet as it entered the network
	// stack to the write of its verdict returning (see LatencyStats). It
	// sets SO_TIMESTAMP on the socket, which turns on receive timestamps
	// system-wide (one clock read per packet received by the host), and
	// costs Run one more clock read per batch. Packets without a kernel
	// timestamp (locally generated ones, in OUTPUT) are not measured.
	Latency bool
	// MaxHeld is the most packets held at once for a later verdict
	// (Verdict.At). 0 means DefaultMaxHeld, or MaxQueueLen/4 if that is
	// less; negative: none (At is ignored). It must be at most half of
	// MaxQueueLen (and MaxMaxHeld), so that held packets never fill the
	// kernel's queue and make it fail open. A Handler asks HoldRoom how
	// many more it may hold; a verdict with At beyond that is given at once
	// (HoldStats.Full).
	MaxHeld int
	// Conntrack asks the kernel for each packet's connection tracking
	// state (NFQA_CFG_F_CONNTRACK: Packet.CtInfo), for ct-state matches.
	// It costs the kernel a dump of the connection per packet (some 200
	// bytes more per message). A kernel that refuses it (one built
	// without CONFIG_NETFILTER_NETLINK_GLUE_CT) binds the queue without
	// it, says so once through Logf, and Queue.Conntrack reports it.
	Conntrack bool
	// Idle, if not nil, is called from Run's goroutine with the engine's
	// clock (as a Handler's now) every 100 ms (idleEvery), between
	// batches, whether packets flow or not, and soon after a call to
	// Queue.Wake: a Handler's state can be looked at, or timers served,
	// also when no traffic flows.
	Idle func(now int64)
	// Logf, if not nil, is called (from Run's goroutine, at most once per
	// second) when the kernel reports that the socket's receive buffer
	// overflowed (ENOBUFS): packets were lost to user space, and accepted
	// or dropped by the kernel as FailClosed says. Run keeps going. It is
	// also called once if the queue is unbound with packets still in it
	// (the verdict accepting them could not be written), with their number.
	Logf func(format string, args ...any)
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxQueueLen == 0 {
		c.MaxQueueLen = DefaultMaxQueueLen
	}
	if c.CopyRange == 0 {
		c.CopyRange = DefaultCopyRange
	}
	if c.CopyRange > MaxCopyRange {
		c.CopyRange = MaxCopyRange
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = DefaultReadBuffer
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	switch {
	case c.MaxHeld == 0:
		c.MaxHeld = min(DefaultMaxHeld, int(c.MaxQueueLen/4))
	case c.MaxHeld < 0:
		c.MaxHeld = 0
	}
	return c
}

// checkMaxHeld reports a MaxHeld the queue cannot take.
func (c Config) checkMaxHeld() error {
	if c.MaxHeld > MaxMaxHeld || c.MaxHeld > int(c.MaxQueueLen/2) {
		return fmt.Errorf("nfq: queue %d: max held %d is more than half the queue length %d (or %d): held packets could fill the queue", c.Queue, c.MaxHeld, c.MaxQueueLen, MaxMaxHeld)
	}
	return nil
}

// Action is what happens to a queued packet. The zero value is Accept.
type Action uint8

const (
	Accept Action = iota // NF_ACCEPT: the packet continues through the stack
	Drop                 // NF_DROP: the packet is discarded
)

func (a Action) String() string {
	switch a {
	case Accept:
		return "ACCEPT"
	case Drop:
		return "DROP"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Verdict is the answer for one packet. The zero value accepts it unchanged,
// so a Handler that leaves a verdict unset lets the packet through.
type Verdict struct {
	Action Action
	// SetMark sets the packet's netfilter mark to Mark with the verdict
	// (NFQA_MARK), e.g. for tc or a later firewall rule to act on.
	SetMark bool
	Mark    uint32
	// At, if after the batch's now (the Handler's clock), holds the packet
	// in the kernel's queue and gives it this verdict at At instead of
	// with the batch: Run's goroutine wakes then, also when no packet
	// arrives (see Config.MaxHeld). 0 (or a time not after now): answered
	// with the batch.
	At int64
}

// Packet is one queued packet as the kernel sent it.
type Packet struct {
	// ID is the kernel's packet id, increasing within a queue.
	ID uint32
	// HWProtocol is the link-layer protocol (EtherType), e.g. 0x0800 for
	// IPv4 and 0x86dd for IPv6; it may be 0 on hooks without one.
	HWProtocol uint16
	// Hook is the netfilter hook the packet was queued from
	// (0 PREROUTING, 1 INPUT, 2 FORWARD, 3 OUTPUT, 4 POSTROUTING).
	Hook uint8
	// Mark is the packet's netfilter mark (0 when it has none).
	Mark uint32
	// InDev and OutDev are the indexes of the input and output
	// interfaces, 0 where the hook has none (no input device in OUTPUT,
	// no output device before routing).
	InDev, OutDev uint32
	// Data is the packet from its IP header on, at most CopyRange bytes.
	// It points into the receive buffer: it is valid only until the
	// Handler returns and must not be kept.
	Data []byte
	// Timestamp is when the packet entered the network stack, in ns since
	// the Unix epoch, if the kernel stamped it (Config.Latency), else 0.
	Timestamp int64
	// Len is the length of the whole packet: the kernel's NFQA_CAP_LEN
	// when Data was cut to the copy range, len(Data) otherwise. (The IP
	// header in Data carries the same length.)
	Len int
	// UID and GID are the owner of the local socket that sent the packet
	// (NFQA_UID, NFQA_GID), when HasOwner says the kernel sent one: only
	// packets made by a local process's socket have an owner; forwarded
	// and incoming packets, and those the kernel makes itself (a TCP
	// reset, a SYN-ACK, a time-wait ACK) have none. Never set when the
	// kernel refused to send owners (Queue.Owners).
	UID, GID uint32
	HasOwner bool
	// CtInfo is the packet's connection tracking state as the kernel's
	// enum ip_conntrack_info (CtNew, CtEstablished, ...: NFQA_CT_INFO)
	// when HasCt says the kernel sent one. On a queue that asked for it
	// (Queue.Conntrack) a packet without one is invalid (conntrack could
	// not track it) or untracked (a raw table's NOTRACK): the kernel
	// sends neither, so they cannot be told apart.
	CtInfo uint8
	HasCt  bool
}

// Handler decides a batch. It must set verdicts[i] for batch[i] (the slice
// comes filled with zero Verdicts: accept) and must not keep either slice or any
// Packet.Data after it returns. now is nanoseconds since the Unix epoch,
// read once for the whole batch: the wall clock at Run's start advanced by
// the monotonic clock, so it never goes backwards and wall-clock steps do
// not move it. A Handler is called from a
// single goroutine, one batch at a time.
type Handler func(batch []Packet, verdicts []Verdict, now int64)

// Stats are counters of a Queue since Open. All fields only grow.
type Stats struct {
	Packets     uint64 // packets received and answered
	Accepted    uint64 // packets answered ACCEPT
	Dropped     uint64 // packets answered DROP
	Batches     uint64 // batches handed to the Handler
	VerdictMsgs uint64 // verdict messages sent (one per run of equal verdicts)
	ENOBUFS     uint64 // receive buffer overruns reported by the kernel
	Lost        uint64 // packets the kernel queued but could not send (gaps in the ids)
	Errors      uint64 // other receive/send errors and kernel error replies
	// StopAccepted counts the packets still in the kernel's queue when it
	// was unbound (a stop past its drain deadline, an error, or Close
	// without Run), accepted unread, with their marks unchanged, by one
	// batch verdict just before the unbind, which would drop them. They
	// are not in Packets.
	StopAccepted uint64
}

// HoldStats count the packets held for a later verdict (Verdict.At).
type HoldStats struct {
	Held     uint64 // held now
	Peak     uint64 // the most held at once since Open
	MaxHeld  int    // the bound (Config.MaxHeld)
	Total    uint64 // packets held since Open
	Released uint64 // held packets given their verdict (at their time, or all at once by a stop)
	// Full counts verdicts with At given at once because MaxHeld packets
	// were held (a Handler that asks HoldRoom never makes any).
	Full uint64
	// Late is how late held packets got their verdicts: from At to the
	// start of the write that gave it (0 for a packet released early, at
	// most 5 µs before At; a stop's releases are not counted).
	Late LatencyStats
}

// LatencyStats summarise verdict latencies measured with Config.Latency.
// Quantiles are upper bounds of histogram buckets, at most Max: exact to
// 1 µs below 1 ms, to 1/16 above.
type LatencyStats struct {
	Count         uint64 // packets measured
	Sum           time.Duration
	P50, P99, Max time.Duration
}

// LatencyHistogram is the verdict latencies measured with Config.Latency
// as a cumulative histogram over bounds chosen by the caller
// (Queue.LatencyHistogram).
type LatencyHistogram struct {
	Count uint64        // packets measured
	Sum   time.Duration // their latencies added up
	// Cumulative[i] counts the packets whose latency is known to be at
	// most the i-th bound. Latencies are kept to the microsecond below
	// 1024 µs and to 1/16 above, so one less than a microsecond (or 1/16)
	// under a bound may be counted only at the next bound.
	Cumulative []uint64
}

// latencyHist is a queue's verdict latencies (or lateness), on the
// project's one histogram (internal/hist) counted in microseconds: 1 µs
// buckets up to 1024 µs, then 16 per power of two, up to 2^26 µs (about
// 67 s). The sum and the largest value are kept in ns. One writer (Run's
// goroutine), any reader. Make it with newLatencyHist.
type latencyHist struct {
	h   *hist.Atomic // values in µs (ns / 1000, truncated); its sum in ns
	max atomic.Int64 // ns
}

// latLayout is latencyHist's layout.
var latLayout = hist.NewLayout(10, 4, 26)

func newLatencyHist() latencyHist { return latencyHist{h: hist.NewAtomic(latLayout)} }

func (h *latencyHist) add(ns int64) {
	h.h.Add(ns / 1000)
	if ns > h.max.Load() {
		h.max.Store(ns) // one writer: Run's goroutine
	}
}

// addSum adds the latencies of a batch (ns) to the sum.
func (h *latencyHist) addSum(ns int64) { h.h.AddSum(ns) }

// histogram folds the buckets into bounds, which must be ascending: a
// bucket counts towards a bound when all of it lies at or below it. A
// value of u µs (truncated) is below u+1 µs, so the bucket of values up to
// U µs counts towards a bound of b ns when (U+1)×1000 - 1 <= b, that is
// U <= (b+1)/1000 - 1.
func (h *latencyHist) histogram(bounds []time.Duration) LatencyHistogram {
	us := make([]int64, len(bounds))
	for i, b := range bounds {
		us[i] = (int64(b)+1)/1000 - 1
	}
	cum := make([]uint64, len(bounds))
	n, sum := h.h.Fold(us, cum)
	return LatencyHistogram{Count: n, Sum: time.Duration(sum), Cumulative: cum}
}

// mergeInto adds h's counts to o (both quiescent).
func (h *latencyHist) mergeInto(o *latencyHist) {
	h.h.MergeInto(o.h)
	if m := h.max.Load(); m > o.max.Load() {
		o.max.Store(m)
	}
}

// stats summarises h. A quantile is its bucket's upper bound in µs plus
// 1 µs (the values in it, truncated to the µs, are below that), but never
// above Max.
func (h *latencyHist) stats() LatencyStats {
	hs := h.h.Stats()
	s := LatencyStats{Count: hs.Count, Sum: time.Duration(hs.Sum)}
	if s.Count == 0 {
		return s
	}
	s.Max = time.Duration(h.max.Load())
	q := func(us int64) time.Duration { return min(time.Duration(us+1)*time.Microsecond, s.Max) }
	s.P50, s.P99 = q(hs.P50), q(hs.P99)
	return s
}

// Errors returned by Open; test them with errors.Is. The message of the
// error returned wraps them with the queue number and a hint.
var (
	// ErrPermission: the process lacks CAP_NET_ADMIN (not root).
	ErrPermission = errors.New("permission denied")
	// ErrBusy: another socket (usually another process) is bound to the queue.
	ErrBusy = errors.New("queue already bound")
	// ErrNoSupport: the kernel has no nfnetlink_queue (module not loaded
	// and not loadable), or no nfnetlink at all.
	ErrNoSupport = errors.New("nfnetlink_queue not available")
)

// stopDrainTimeout bounds how long Run keeps answering, through the
// Handler, packets that were already queued when its context was
// cancelled; those left then are accepted at once (see Queue.Run). It is
// measured on the monotonic clock.
const stopDrainTimeout = 500 * time.Millisecond

// enobufsLogEvery is the least time between two ENOBUFS log lines.
const enobufsLogEvery = int64(time.Second)
