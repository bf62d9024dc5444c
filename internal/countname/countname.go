// Package countname declares, once, the name of every counter packetshaper
// writes: the daemon's stats line, its metrics (their families are these
// names through daemon's namespace helper, prometheus.BuildFQName) and
// the control socket's status and flow listing; replay's --json and
// summary; the replay report's totals; top's columns. Each name is a
// string literal here only; the outputs take it from these constants
// (TestNamesDeclaredOnce holds the tree to that). The control socket's
// JSON keys are struct tags, which cannot take a constant: control's tests
// hold those tags to these names. The fail-open counters' names are
// failopen's (KeyPassed, KeySecs, KeyExact), beside the code that counts
// them.
//
// It imports nothing: any package may use it.
package countname

// The packets decided, by verdict.
const (
	// Packets: packets decided, Accepted + Dropped.
	Packets  = "packets"
	Accepted = "accepted"
	Dropped  = "dropped"
	// ShadowDropped: packets over a shadow rule's limit, accepted.
	ShadowDropped = "shadow_dropped"
	// Marked: packets over a marking rule's limit, accepted with the mark.
	Marked = "marked"
)

// What the engine saw that no rule limits.
const (
	// Malformed: packets whose IP header is invalid.
	Malformed = "malformed"
	// NoPorts: packets whose ports could not be read (a fragment, a short
	// header), limited by address and protocol.
	NoPorts = "no_ports"
	// Unmatched: packets no rule matched (accepted).
	Unmatched = "unmatched"
	// NonIP: records of a capture that carry no IP packet (replay).
	NonIP = "non_ip"
)

// The flow tables.
const (
	// Flows: flows in the tables; FlowsSeen: flows ever created (replay).
	Flows     = "flows"
	FlowsSeen = "flows_seen"
	// Evictions: flows evicted from a full table; Expired: flows
	// forgotten after their idle timeout.
	Evictions = "evictions"
	Expired   = "expired"
)

// Shaping.
const (
	// Delayed: packets accepted later than they arrived.
	Delayed = "delayed"
	// ShapeOverflow: packets a shaping rule dropped because its queue
	// (max-delay) or the held packets (--max-held) were full.
	ShapeOverflow = "shape_overflow"
	// Held, HeldPeak, MaxHeld: packets held for a later verdict now, the
	// most held at once, and the bound (--max-held).
	Held     = "held"
	HeldPeak = "held_peak"
	MaxHeld  = "max_held"
	// The shaping delays' quantiles and the release lateness's (how late
	// held packets got their verdicts past their departure time), in µs
	// (the stats line).
	DelayP50Us = "delay_p50_us"
	DelayP99Us = "delay_p99_us"
	DelayMaxUs = "delay_max_us"
	LateP50Us  = "late_p50_us"
	LateP99Us  = "late_p99_us"
	LateMaxUs  = "late_max_us"
	// DelayP50Ns, DelayP99Ns, DelayMaxNs: the delays' quantiles (replay).
	DelayP50Ns = "delay_p50_ns"
	DelayP99Ns = "delay_p99_ns"
	DelayMaxNs = "delay_max_ns"
)

// A queue, the kernel's view of it, and the socket.
const (
	// Queued: packets the kernel holds waiting for a verdict.
	Queued = "queued"
	// QueueDrops: packets the kernel dropped, the queue full
	// (fail-closed); SocketDrops: the socket's buffer full; Lost: queued
	// but never received.
	QueueDrops  = "queue_drops"
	SocketDrops = "socket_drops"
	Lost        = "lost"
	// Enobufs: receive-buffer overruns; StopAccepted: packets accepted at
	// a clean stop; Errors: failed verdicts and receives.
	Enobufs      = "enobufs"
	StopAccepted = "stop_accepted"
	Errors       = "errors"
	// Batches, VerdictMsgs: batch verdicts sent, verdict messages sent.
	Batches     = "batches"
	VerdictMsgs = "verdict_msgs"
)

// --latency: the verdicts timed, and their latency's quantiles in µs.
const (
	LatCount = "lat_count"
	LatP50Us = "lat_p50_us"
	LatP99Us = "lat_p99_us"
	LatMaxUs = "lat_max_us"
)

// --offload.
const (
	Offloaded          = "offloaded"
	OffloadActive      = "offload_active"
	OffloadKernelDrops = "offload_kernel_drops"
	OffloadLost        = "offload_lost"
	OffloadErrors      = "offload_errors"
)

// Global rules and their store.
const (
	RedisCommands = "redis_commands"
	RedisErrors   = "redis_errors"
	// FallbackPackets: packets of a global rule its local fallback limit
	// decided; GlobalMode: leases or fallback; FallbackRate: the local
	// limit in fallback.
	FallbackPackets = "fallback_packets"
	GlobalMode      = "global_mode"
	FallbackRate    = "fallback_rate"
	GlobalKeys      = "global_keys"
	GlobalAsks      = "global_asks"
	GlobalGranted   = "global_granted"
	GlobalShare     = "global_share"
	GlobalHosts     = "global_hosts"
)
