package shaper

import (
	"fmt"
	"time"

	"github.com/packetshaper/packetshaper/flows"
)

// Verdict is what happens to a packet. The zero Verdict is Accept: when in
// doubt, packetshaper lets traffic through.
type Verdict uint8

const (
	Accept Verdict = iota
	Drop
)

func (v Verdict) String() string {
	if v == Drop {
		return "DROP"
	}
	return "ACCEPT"
}

// ParseVerdict parses "accept" or "drop" (any case).
func ParseVerdict(s string) (Verdict, error) {
	switch s {
	case "accept", "ACCEPT", "Accept":
		return Accept, nil
	case "drop", "DROP", "Drop":
		return Drop, nil
	}
	return 0, configErr(about(SettingVerdict), "unknown verdict %q (want accept or drop)", s)
}

// Defaults used for zero Config fields.
const (
	// DefaultBurstPackets is the token bucket's capacity with a packet rate,
	// as iptables hashlimit's default burst.
	DefaultBurstPackets = 5
	// DefaultBurstBytes is the least default capacity with a byte rate:
	// one largest IP packet, so that every packet can pass at some time.
	DefaultBurstBytes = 65535
	// DefaultWindow is the window algorithms' window.
	DefaultWindow = int64(time.Second)
	// DefaultFlowTimeout is how long a flow may be idle before it is
	// forgotten.
	DefaultFlowTimeout = int64(60 * time.Second)
	// DefaultMaxDelay is how long a shaping rule holds a packet at most
	// when its Config gives no MaxDelay.
	DefaultMaxDelay = int64(50 * time.Millisecond)
)

// Bounds that New enforces.
const (
	// MinByteBudget: with a byte rate, the burst (token bucket) or the
	// per-window limit must hold a full-size Ethernet packet.
	MinByteBudget = 1500
	// MaxBurst is the largest token bucket capacity.
	MaxBurst = 1e9
	// MaxLogBytes caps what the sliding-window logs of a full flow table
	// may take: MaxFlows × limit × 8 bytes.
	MaxLogBytes = 2 << 30
)

// Config describes one rule's limiter and flows: how a flow is keyed, how it
// is limited, how many flows are kept. Zero fields mean the documented
// defaults; New never writes them back. Config is comparable: two equal
// Configs limit alike (Reload keeps a rule's flows when its Config is
// unchanged).
type Config struct {
	// Algorithm is the per-flow limiter (default TokenBucket).
	Algorithm Algorithm
	// Rate is each flow's rate per second: packets, or bytes when Bytes.
	// Required.
	Rate float64
	// Bytes makes a packet's cost its IP length (header + payload, as
	// the IP header states it) instead of 1.
	Bytes bool
	// Burst is the token bucket's capacity, in packets or bytes. 0 means
	// DefaultBurstPackets, or with Bytes the larger of DefaultBurstBytes
	// and a tenth of a second at Rate. Ignored by the window algorithms.
	Burst float64
	// Window is the window length in nanoseconds (0: DefaultWindow).
	// Ignored by TokenBucket.
	Window int64
	// Key says what makes a flow (zero value: 5-tuple, per direction).
	Key flows.KeyConfig
	// MaxFlows caps the flow table (0: flows.DefaultMaxFlows).
	MaxFlows int
	// FlowTimeout is the idle time in nanoseconds after which a flow is
	// forgotten (0: DefaultFlowTimeout; negative: never).
	FlowTimeout int64
	// Shape makes a TokenBucket rule a shaper, the leaky bucket as a
	// queue: a packet over the limit that would conform within MaxDelay is
	// held until it does (Decision.Depart) instead of dropped; one that
	// would wait longer is dropped (ShapeOverflow). The queue holds
	// burst + rate × MaxDelay. Only with TokenBucket.
	Shape bool
	// MaxDelay is how long a shaping rule holds a packet at most, in
	// nanoseconds (0: DefaultMaxDelay; at most MaxMaxDelay). Only with
	// Shape.
	MaxDelay int64
	// Global makes the limit one budget per flow key shared by every host
	// running the rule, taken in leases from a shared store (Rule.Global;
	// see Global). Only TokenBucket and FixedWindow. A rule without a
	// Global source runs as a local one.
	Global bool
	// GlobalSlack is the fraction of Rate × 1 s that all hosts together may
	// hold in leases of one key (0: DefaultGlobalSlack). Global rules only.
	GlobalSlack float64
}

// DefaultGlobalSlack is a global rule's slack when Config.GlobalSlack is 0.
const DefaultGlobalSlack = 0.01

// LimiterConfig returns the limiter parameters c resolves to, defaults
// applied.
func (c *Config) LimiterConfig() LimiterConfig {
	lc := LimiterConfig{Algorithm: c.Algorithm, Rate: c.Rate, Burst: c.Burst, Window: c.Window}
	if lc.Burst == 0 {
		lc.Burst = DefaultBurstPackets
		if c.Bytes {
			lc.Burst = min(max(DefaultBurstBytes, c.Rate/10), MaxBurst)
		}
	}
	if lc.Window == 0 {
		lc.Window = DefaultWindow
	}
	if c.Shape {
		lc.MaxDelay = c.MaxDelay
		if lc.MaxDelay == 0 {
			lc.MaxDelay = DefaultMaxDelay
		}
	}
	return lc
}

// Check reports what is wrong with c, if anything: the error New or
// NewPolicy would return for a rule limited by c.
func (c *Config) Check() error {
	_, err := checkLimit(*c)
	return err
}

// Action is what a rule does with the packets it matches.
type Action uint8

const (
	// ActionLimit runs each flow of the rule through the rule's limiter.
	ActionLimit Action = iota
	// ActionAccept accepts every packet: never limited.
	ActionAccept
	// ActionDrop drops every packet.
	ActionDrop
)

var actionNames = [...]string{ActionLimit: "limit", ActionAccept: "accept", ActionDrop: "drop"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Rule is one class of traffic as the engine runs it. Rules are made by
// package policy from a rule file (or from the command line's limiter flags,
// a one-rule policy); which packets a rule matches is the Classifier's
// business.
type Rule struct {
	// Name names the rule in counters and logs.
	Name string
	// Match identifies what the rule matches, for Reload: a rule keeps its
	// flows and counters across a reload when its Name, Match, Action and
	// Limit are unchanged. Package policy writes the match table in a
	// canonical form here.
	Match string
	// Action is what the rule does; ActionLimit uses Limit.
	Action Action
	// Limit is the limiter and flow keying of an ActionLimit rule.
	Limit Config
	// Shadow accepts the packets the limiter would drop and counts them
	// as ShadowDropped: a rule tried without enforcing it.
	Shadow bool
	// MarkExceeded accepts the packets over the limit with their mark
	// changed to (mark &^ MarkMask) | Mark (on-exceed = "mark"), so that
	// tc or a later firewall rule can act on them; they count as Marked.
	MarkExceeded   bool
	Mark, MarkMask uint32
	// Total, if not empty, names the total (Policy.Totals) the rule's
	// packets charge beside their flow's limit: a packet passes only if
	// both allow it, and is charged to both only then. Only policing
	// limit rules (not shaping, not global). A packet over the total is
	// over the limit: dropped, or accepted by a shadow rule or with a new
	// mark, as Exceeded says (and OverTotal).
	Total string
	// Global is the budget source of a rule whose Limit.Global is set;
	// nil runs it as a local rule. Reload keeps a rule's flows when its
	// Name, Match, Action and Limit are unchanged and it has a source or
	// not as before: their leases come from the new source once the old
	// one retires them.
	Global Global
}

// Meta is what the packet source knows about a packet beside its bytes.
// The zero Meta is a packet with no mark and no known interfaces, on
// queue 0 (replay without interface names).
type Meta struct {
	// Mark is the packet's netfilter mark (skb->mark).
	Mark uint32
	// InIf and OutIf identify the input and output interfaces (0: none
	// or unknown): interface indexes live, ids the Classifier gave the
	// capture's interface names in replay.
	InIf, OutIf uint32
	// Queue is the NFQUEUE queue number the packet came from.
	Queue uint16
	// Len is the packet's real length as its source knows it beside the
	// bytes it was given: live, the kernel's packet length (NFQA_CAP_LEN,
	// nfq.Packet.Len); in replay, the record's original length. 0: unknown
	// (the length of the bytes given).
	Len int
	// UID and GID are the owner of the local socket that sent the packet
	// (NFQUEUE's NFQA_UID and NFQA_GID), when HasOwner says there is one:
	// there is none for forwarded and incoming packets, replies the
	// kernel makes itself (a TCP reset, a SYN-ACK), and in replay. A rule
	// keyed by uid or gid puts ownerless packets in one flow, "no owner";
	// a uid or gid match does not match them.
	UID, GID uint32
	HasOwner bool
	// CtState is the packet's connection tracking state: one of the
	// CtState bits, or CtInvalid|CtUntracked live where the kernel sent
	// none (NFQUEUE does not tell them apart), or 0 when unknown (the
	// kernel was not asked for it, or refused): a ct-state match then
	// holds for limit and drop rules and not for accept rules, as a
	// hidden port does.
	CtState CtState
	// Cost, when Set, is what the packet costs a limit rule instead of
	// what its decode says (see Need): a GSO/GRO packet's segments, a
	// fragment's share of its datagram, as the kernel fast path charges
	// them. Shaping and global rules ignore it.
	Cost Cost
}

// CtState is a set of connection tracking states (iptables' --ctstate).
type CtState uint8

// The connection tracking states.
const (
	CtNew CtState = 1 << iota
	CtEstablished
	CtRelated
	CtInvalid
	CtUntracked
)

// CtStates names the states, by bit.
var CtStates = [...]string{"new", "established", "related", "invalid", "untracked"}

// Classifier picks the rule that decides a packet: the index in
// Policy.Rules of the first rule that matches p (decoded, not malformed)
// with meta m, or -1 when none does. Implementations must not allocate and
// must not keep p or m.
type Classifier interface {
	Classify(p *flows.Packet, m *Meta) int
}

// Policy is a list of rules, tried in order, and what decides packets that
// are not IP.
type Policy struct {
	// Rules, in the order the Classifier numbers them. At most MaxRules.
	Rules []Rule
	// Classifier picks a packet's rule. It may be nil only when there is
	// one rule, which then matches every packet.
	Classifier Classifier
	// Malformed is the verdict for packets whose IP header is invalid
	// (flows.Malformed; the kernel drops those itself). Default Accept.
	Malformed Verdict
	// Totals are the totals the rules may charge (Rule.Total), each
	// named once.
	Totals []Total
	// OffloadAfter, if above 0, makes the engine report a flow that has
	// had this many packets in a row dropped (by an enforcing rule that
	// drops what exceeds it): the exact 5-tuple of the packet that made
	// the count goes to TakeOffloads, for the live path to drop in the
	// kernel. Only TCP, UDP, UDP-Lite and SCTP packets with readable ports
	// and protocols without ports other than ICMP are reported: those the
	// kernel can match as exactly as the flow key made them.
	OffloadAfter uint32
}

// MaxRules bounds a policy's rules.
const MaxRules = 4096

// Decision is what Decide made of a packet.
type Decision struct {
	Verdict Verdict
	// Depart is 0 unless a shaping rule holds the packet (Config.Shape):
	// then it is the time, on the clock of DecidePacket's now and after
	// it, at which the packet is to be accepted (Verdict is Accept). The
	// engine has charged the packet to its flow already; the caller holds
	// it until then.
	Depart int64
	// SetMark: accept with the packet's mark set to Mark (a rule with
	// MarkExceeded, over its limit). Mark is the whole new mark.
	SetMark bool
	Mark    uint32
	// Rule is the index of the rule that decided, -1 for a packet no rule
	// matched or a malformed one.
	Rule int
	// Key is the flow the packet counted against when Rule limits (its
	// Limit.Key's key), zero otherwise.
	Key flows.Key
	// Exceeded: the packet was over its rule's limit. It was dropped
	// (Verdict Drop), or accepted by a shadow rule (a shadow drop) or
	// with a new mark (SetMark).
	Exceeded bool
	// OverTotal: it was its rule's total that refused the packet
	// (Exceeded is set too); its flow was charged nothing.
	OverTotal bool
	// Malformed: the IP header is invalid (Rule is -1, Verdict the
	// policy's Malformed verdict). A Rule of -1 otherwise means that no
	// rule matched.
	Malformed bool
}

// Stats counts what an Engine has decided. Packets = Accepted + Dropped;
// Malformed, NoPorts and Unmatched packets are counted there too, with the
// verdict they got.
type Stats struct {
	Packets, Accepted, Dropped uint64
	// Malformed: packets whose IP header is invalid. NoPorts: packets
	// whose ports could not be read (keyed by address and protocol, and
	// limited). Unmatched: packets no rule matched (accepted).
	Malformed, NoPorts, Unmatched uint64
	// Flows are summed over the rules' tables; Evictions and Expired too,
	// plus those of the rules that reloads retired (they never go down).
	Flows, Evictions, Expired uint64
	// Offloads counts flows reported to TakeOffloads; OffloadsLost, those
	// that found its buffer full.
	Offloads, OffloadsLost uint64
	// Delayed counts packets accepted by shaping rules at a later time
	// (Decision.Depart), in Accepted; ShapeOverflow, packets shaping rules
	// dropped because they would have waited longer than the rule's
	// MaxDelay or could not be held (SetHoldRoom), in Dropped.
	Delayed, ShapeOverflow uint64
}

// RuleStats counts one rule's packets. Packets = Accepted + Dropped.
type RuleStats struct {
	Packets, Accepted, Dropped uint64
	// ShadowDropped counts packets a shadow rule accepted that its limiter
	// would have dropped; Marked, packets over the limit accepted with a
	// new mark. Both are in Accepted.
	ShadowDropped, Marked uint64
	// Delayed (in Accepted) and ShapeOverflow (in Dropped): as in Stats,
	// for a shaping rule.
	Delayed, ShapeOverflow uint64
	// Flows now in the rule's table, and flows pushed out of a full table
	// or forgotten after the idle timeout.
	Flows, Evictions, Expired uint64
	// Fallback counts the packets of a global rule that the local
	// fallback limiter decided (the store unreachable); they are in
	// Packets too.
	Fallback uint64
}

// FlowStats counts one flow's packets since it entered the table.
type FlowStats struct {
	Packets, Accepted, Dropped uint64
}
