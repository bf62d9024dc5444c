package shaper

import (
	"fmt"
	"math"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/hist"
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
}

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

type flow struct {
	state State
	stats FlowStats
	// dropRun counts the flow's packets dropped in a row (OffloadAfter).
	dropRun uint32
}

// gflow is a flow of a global rule: its lease beside the local state, which
// only the fallback limiter uses. Local rules' flows stay 8 bytes smaller.
type gflow struct {
	flow
	lease *Lease // nil: the source had no room (Overflow limiter)
	// lim is the local limiter state was last used with: a flow starts
	// afresh (a full bucket of that limiter) when it changes.
	lim *Limiter
}

// ruleState is what a rule accumulates at run time: its flow table and
// counters, with the limiter they go with. It outlives an Engine when
// Reload keeps the rule; only the goroutine deciding packets touches it.
type ruleState struct {
	// The fields a packet reads come first, the limiter by value: one
	// pointer less to chase per packet when rules take turns.
	table  *flows.Table[flow]  // an ActionLimit rule's, unless global
	gtable *flows.Table[gflow] // a global rule's (with a source)
	lim    Limiter
	bytes  bool
	shape  bool // lim shapes: Depart, not Allow
	key    flows.KeyConfig
	stats  RuleStats
	off    OffloadLimit // what the kernel may hold an offloaded flow to
}

// engineRule is one of an Engine's rules: its settings, which belong to
// the Engine and never change, and its state, which Reload may hand on.
type engineRule struct {
	Rule
	st *ruleState
}

// hotRule is what DecidePacket needs of a rule, packed so that with many
// rules taking turns their settings stay in a few cache lines.
type hotRule struct {
	st             *ruleState
	action         Action
	shadow, markEx bool
	mark, mask     uint32
	g              *globalRule // a global rule's source, nil for others
}

// globalRule is a global rule's source as an engine holds it.
type globalRule struct {
	src   Global
	local *LocalLimit
}

// offloadBuf is how many offload reports wait for TakeOffloads.
const offloadBuf = 64

// Engine decides packets. It is not safe for concurrent use: one goroutine
// at a time calls Decide, Stats, Rules and Flows. Sources that must share
// limits share one Engine and serialize their calls (the daemon's queues
// take turns under a lock, a batch at a time, so that a key has one bucket
// whichever queue its packets arrive on).
type Engine struct {
	rules     []engineRule
	hot       []hotRule // rules[i]'s per-packet settings
	cls       Classifier
	malformed Verdict
	offAfter  uint32
	// stats is shared with the engines Reload makes from this one, so
	// that the counters go on; only the deciding goroutine writes it.
	stats *Stats
	// delays histograms the delays of held packets; shared as stats.
	delays *hist.Hist
	// holdRoom is how many more packets the caller can hold
	// (SetHoldRoom).
	holdRoom int

	offloads [offloadBuf]flows.Key
	offLims  [offloadBuf]OffloadLimit
	nOff     int

	// pkt is the packet being decided. It lives here, not on
	// DecidePacket's stack, because the Classifier is an interface: a
	// local passed to it would escape, an allocation per packet. gkey is
	// the key handed to a Global, for the same reason.
	pkt  flows.Packet
	gkey flows.Key
}

// New returns a one-rule engine that limits every packet as c says,
// accepting malformed ones.
func New(c Config) (*Engine, error) {
	return NewPolicy(Policy{Rules: []Rule{{Name: "default", Limit: c}}})
}

// NewPolicy checks p and returns an Engine for it.
func NewPolicy(p Policy) (*Engine, error) {
	return build(p, nil)
}

// Reload returns an engine for p that takes over e's state: a rule whose
// Name, Match, Action and Limit are those of one of e's rules keeps that
// rule's flows, limiter state and counters (its Shadow and marking may
// change); other rules start empty. The engine-wide counters go on. kept
// lists the names of the rules that kept their state. e must not be used
// once the new engine is: they share the kept rules' tables. On error e is
// unchanged.
func (e *Engine) Reload(p Policy) (ne *Engine, kept []string, err error) {
	ne, err = build(p, e)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range ne.rules {
		for _, o := range e.rules {
			if o.st == r.st {
				kept = append(kept, r.Name)
			}
		}
	}
	return ne, kept, nil
}

func build(p Policy, old *Engine) (*Engine, error) {
	if len(p.Rules) == 0 {
		return nil, fmt.Errorf("a policy needs at least one rule")
	}
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("%d rules, more than %d", len(p.Rules), MaxRules)
	}
	if p.Classifier == nil && len(p.Rules) != 1 {
		return nil, fmt.Errorf("%d rules need a classifier", len(p.Rules))
	}
	if p.Malformed > Drop {
		return nil, fmt.Errorf("unknown verdict %d", p.Malformed)
	}
	e := &Engine{cls: p.Classifier, malformed: p.Malformed, offAfter: p.OffloadAfter, stats: &Stats{}, delays: newDelayHist(), holdRoom: math.MaxInt}
	if old != nil {
		// Shared, not copied: old may still be deciding packets on
		// another goroutine until the new engine replaces it.
		e.stats = old.stats
		e.delays = old.delays
	}
	used := map[*ruleState]bool{}
	for i, r := range p.Rules {
		if r.Action > ActionDrop {
			return nil, fmt.Errorf("rule %d (%s): unknown action %d", i, r.Name, r.Action)
		}
		var rs *ruleState
		if old != nil {
			for _, o := range old.rules {
				if !used[o.st] && o.Name == r.Name && o.Match == r.Match && o.Action == r.Action && o.Limit == r.Limit &&
					(o.st.gtable != nil) == isGlobal(r) {
					rs = o.st
					break
				}
			}
		}
		if rs == nil {
			var err error
			if rs, err = newRuleState(r); err != nil {
				if len(p.Rules) == 1 {
					return nil, err
				}
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
		}
		used[rs] = true
		e.rules = append(e.rules, engineRule{Rule: r, st: rs})
		h := hotRule{st: rs, action: r.Action, shadow: r.Shadow, markEx: r.MarkExceeded, mark: r.Mark, mask: r.MarkMask}
		if isGlobal(r) {
			h.g = &globalRule{src: r.Global, local: r.Global.Local()}
		}
		e.hot = append(e.hot, h)
	}
	return e, nil
}

// Table is the flow table c gives, its defaults applied: its cap (MaxFlows,
// or flows.DefaultMaxFlows) and idle timeout in nanoseconds (FlowTimeout,
// or DefaultFlowTimeout; negative: never).
func (c *Config) Table() (maxFlows int, timeout int64) {
	maxFlows, timeout = c.MaxFlows, c.FlowTimeout
	if maxFlows == 0 {
		maxFlows = flows.DefaultMaxFlows
	}
	if timeout == 0 {
		timeout = DefaultFlowTimeout
	}
	return maxFlows, timeout
}

// isGlobal reports whether r runs as a global rule: it says so and has a
// source.
func isGlobal(r Rule) bool {
	return r.Action == ActionLimit && r.Limit.Global && r.Global != nil
}

func newRuleState(r Rule) (*ruleState, error) {
	if r.Action != ActionLimit {
		return &ruleState{}, nil
	}
	return newLimitState(r.Limit, isGlobal(r))
}

// newLimitState checks c and makes the state of a rule limited by it, with
// the flow table of a global rule if global.
func newLimitState(c Config, global bool) (*ruleState, error) {
	lim, err := checkLimit(c)
	if err != nil {
		return nil, err
	}
	maxFlows, timeout := c.Table()
	rs := &ruleState{lim: *lim, key: c.Key, bytes: c.Bytes, shape: lim.maxDelay > 0, off: offloadLimit(c.LimiterConfig(), c.Bytes)}
	if global {
		rs.gtable = flows.NewTable[gflow](maxFlows, timeout)
	} else {
		rs.table = flows.NewTable[flow](maxFlows, timeout)
	}
	return rs, nil
}

// checkLimit checks c and returns its limiter; it allocates no flow table.
func checkLimit(c Config) (*Limiter, error) {
	if c.Bytes && c.Algorithm == SlidingWindow {
		return nil, configErr(about(SettingAlgorithm), "sliding-window counts packets; with a bit rate use sliding-window-counter, fixed-window or token-bucket")
	}
	lc := c.LimiterConfig()
	if c.Bytes {
		// A byte budget below one full-size packet drops such packets
		// forever: refuse it rather than shape by surprise.
		switch {
		case lc.Algorithm == TokenBucket && lc.Burst < MinByteBudget:
			return nil, configErr(about(SettingBurst), "a burst of %v bytes is below one full-size packet (%d bytes): larger packets could never pass", lc.Burst, MinByteBudget)
		case lc.Algorithm != TokenBucket && lc.Rate*float64(lc.Window)/1e9 < MinByteBudget:
			return nil, configErr(about(SettingWindow, SettingAlgorithm), "rate × window is %.0f bytes, below one full-size packet (%d bytes): larger packets could never pass; raise the rate or the window", lc.Rate*float64(lc.Window)/1e9, MinByteBudget)
		}
	}
	if c.MaxFlows < 0 {
		return nil, configErr(about(SettingMaxFlows), "max flows must not be negative")
	}
	if c.Shape {
		if c.Algorithm != TokenBucket {
			return nil, configErr(about(SettingShape, SettingAlgorithm), "only the token bucket (leaky bucket) shapes, not %v", c.Algorithm)
		}
		if c.FlowTimeout > 0 && c.FlowTimeout < lc.MaxDelay {
			return nil, configErr(about(SettingFlowTimeout, SettingMaxDelay), "a flow timeout of %v is below the max delay of %v: a flow could be forgotten while its packets are held", time.Duration(c.FlowTimeout), time.Duration(lc.MaxDelay))
		}
	} else if c.MaxDelay != 0 {
		return nil, configErr(about(SettingMaxDelay), "a max delay needs shaping")
	}
	if c.Global {
		if c.Shape {
			return nil, configErr(about(SettingShape, SettingGlobal), "a global limit does not shape: its budget comes in leases, not a departure time per packet; shape locally or police globally")
		}
		if lc.Algorithm != TokenBucket && lc.Algorithm != FixedWindow {
			return nil, configErr(about(SettingAlgorithm, SettingGlobal), "a global limit is a token-bucket or fixed-window one, not %v", lc.Algorithm)
		}
		if s := c.GlobalSlack; !(s >= 0 && s <= 1) {
			return nil, configErr(about(SettingGlobalSlack), "global slack must be between 0 and 1 (a fraction of rate × 1 s), not %v", s)
		}
	} else if c.GlobalSlack != 0 {
		return nil, configErr(about(SettingGlobalSlack, SettingGlobal), "global slack is for global limits only")
	}
	if err := c.Key.Validate(); err != nil {
		at := about(SettingPrefix, SettingKey)
		if c.Key.Symmetric {
			at = about(SettingSymmetric, SettingPrefix)
		}
		return nil, &ConfigError{Settings: at, Msg: err.Error()}
	}
	lim, err := NewLimiter(lc)
	if err != nil {
		return nil, err
	}
	maxFlows, _ := c.Table()
	if lc.Algorithm == SlidingWindow && float64(maxFlows)*float64(lim.limit)*8 > MaxLogBytes {
		return nil, configErr(about(SettingMaxFlows, SettingAlgorithm), "sliding-window keeps %d timestamps (8 bytes each) for each of up to %d flows: %.1f GiB, over the %d GiB cap; lower max flows or the limit, or use sliding-window-counter",
			lim.limit, maxFlows, float64(maxFlows)*float64(lim.limit)*8/(1<<30), MaxLogBytes>>30)
	}
	return lim, nil
}

// Decide decodes pkt, which starts at the IP header, and returns its verdict
// at time now (nanoseconds since the Unix epoch), for a packet with no
// metadata (the zero Meta). See DecidePacket.
func (e *Engine) Decide(pkt []byte, now int64) Verdict {
	var d Decision
	e.DecidePacket(pkt, nil, now, &d)
	return d.Verdict
}

// noMeta is what a nil *Meta stands for.
var noMeta Meta

// DecidePacket decodes pkt, which starts at the IP header, picks its rule
// from the packet and m (nil: the zero Meta), runs the rule's flow limiter at
// time now (nanoseconds since the Unix epoch) and writes the outcome to d.
// It does not allocate once the flow tables have grown to their working
// size. The decision is written in place rather than returned: a returned
// composite is built in a temporary and copied, which cost more than the
// whole limiter.
func (e *Engine) DecidePacket(pkt []byte, m *Meta, now int64, d *Decision) {
	p := &e.pkt
	wire := 0
	if m != nil {
		wire = m.Len
	}
	p.DecodeLen(pkt, wire)
	e.stats.Packets++
	d.SetMark, d.Exceeded, d.Malformed, d.Depart = false, false, false, 0
	if p.Class == flows.Malformed {
		e.stats.Malformed++
		d.Verdict, d.Rule, d.Key, d.Malformed = e.malformed, -1, flows.Key{}, true
		e.count(e.malformed)
		return
	}
	if p.NoPorts {
		e.stats.NoPorts++
	}
	ri := 0
	if e.cls != nil {
		if m == nil {
			m = &noMeta
		}
		if ri = e.cls.Classify(p, m); ri < 0 || ri >= len(e.hot) {
			e.stats.Unmatched++
			e.stats.Accepted++
			d.Verdict, d.Rule, d.Key = Accept, -1, flows.Key{}
			return
		}
	}
	d.Rule = ri
	r := &e.hot[ri]
	rs := r.st
	rs.stats.Packets++
	switch r.action {
	case ActionAccept:
		d.Verdict, d.Key = Accept, flows.Key{}
		rs.stats.Accepted++
		e.stats.Accepted++
		return
	case ActionDrop:
		d.Verdict, d.Key = Drop, flows.Key{}
		rs.stats.Dropped++
		e.stats.Dropped++
		return
	}
	rs.key.KeyTo(&d.Key, p)
	cost := int64(1)
	if rs.bytes {
		cost = int64(p.Length) // the real length: flows.Packet.DecodeLen
	}
	var f *flow
	var ok bool
	if r.g == nil {
		var fresh bool
		f, fresh = rs.table.Get(&d.Key, now)
		if fresh {
			rs.lim.Reset(&f.state, now)
			f.stats = FlowStats{}
			f.dropRun = 0
		}
		if rs.shape {
			f.stats.Packets++
			e.shape(rs, f, p, now, cost, d)
			return
		}
		ok = rs.lim.Allow(&f.state, now, cost)
	} else {
		gf, fresh := rs.gtable.Get(&d.Key, now)
		f = &gf.flow
		if fresh {
			rs.lim.Reset(&f.state, now)
			f.stats = FlowStats{}
			f.dropRun = 0
			gf.lim = nil
			e.gkey = d.Key
			gf.lease = r.g.src.Lease(&e.gkey)
		}
		ok = e.allowGlobal(r.g, gf, &d.Key, now, cost, &rs.stats)
	}
	f.stats.Packets++
	if ok {
		f.stats.Accepted++
		f.dropRun = 0
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict = Accept
		return
	}
	// Over the limit.
	f.stats.Dropped++
	d.Exceeded = true
	switch {
	case r.shadow:
		rs.stats.ShadowDropped++
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict = Accept
	case r.markEx:
		rs.stats.Marked++
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict, d.SetMark = Accept, true
		mark := uint32(0)
		if m != nil {
			mark = m.Mark
		}
		d.Mark = mark&^r.mask | r.mark
	default:
		rs.stats.Dropped++
		e.stats.Dropped++
		d.Verdict = Drop
		if e.offAfter > 0 {
			if f.dropRun++; f.dropRun >= e.offAfter {
				f.dropRun = 0
				e.offload(rs, p)
			}
		}
	}
}

// shape decides a packet of flow f of a shaping rule: accepted now, held
// until its departure, or dropped because its rule's queue is full (it
// would wait longer than the max delay) or the caller can hold no more.
func (e *Engine) shape(rs *ruleState, f *flow, p *flows.Packet, now, cost int64, d *Decision) {
	dep, ok := rs.lim.Depart(&f.state, now, cost, e.holdRoom > 0)
	if ok {
		f.stats.Accepted++
		f.dropRun = 0
		rs.stats.Accepted++
		e.stats.Accepted++
		d.Verdict = Accept
		if dep > now {
			d.Depart = dep
			e.holdRoom--
			rs.stats.Delayed++
			e.stats.Delayed++
			e.delays.Add(dep - now)
		}
		return
	}
	f.stats.Dropped++
	rs.stats.Dropped++
	rs.stats.ShapeOverflow++
	e.stats.Dropped++
	e.stats.ShapeOverflow++
	d.Verdict, d.Exceeded = Drop, true
	if e.offAfter > 0 {
		if f.dropRun++; f.dropRun >= e.offAfter {
			f.dropRun = 0
			e.offload(rs, p)
		}
	}
}

// SetHoldRoom tells the engine how many more packets its caller can hold:
// shaping rules delay at most n more packets (each counts one down), and
// drop as ShapeOverflow, uncharged, a packet they would have delayed beyond
// that. The live path sets it before each batch from the packets its queue
// may still hold. A new engine has no bound.
func (e *Engine) SetHoldRoom(n int) { e.holdRoom = n }

// Delays summarises the delays of the packets shaping rules held so far.
func (e *Engine) Delays() DelayStats { return e.delays.Stats() }

// allow decides a packet of cost at now for flow f of a global rule: from
// its lease, or with the local fallback limiter while the source has set
// one.
func (e *Engine) allowGlobal(g *globalRule, f *gflow, k *flows.Key, now, cost int64, st *RuleStats) bool {
	if lim := g.local.fallback.Load(); lim != nil {
		st.Fallback++
		if f.lease != nil {
			f.lease.Demand(cost)
		}
		return f.allowLocal(lim, now, cost)
	}
	if l := f.lease; l != nil {
		if l.Take(now, cost) {
			return true
		}
		if !l.Retired() {
			return false
		}
		// The source gave the lease up (the key went idle there, or
		// the source was replaced by a reload): take the current one.
		e.gkey = *k
		if f.lease = g.src.Lease(&e.gkey); f.lease != nil {
			return f.lease.Take(now, cost)
		}
	}
	if lim := g.local.overflow.Load(); lim != nil {
		return f.allowLocal(lim, now, cost)
	}
	return false
}

// allowLocal runs f's local state through lim, starting it afresh when it
// was last used with another limiter.
func (f *gflow) allowLocal(lim *Limiter, now, cost int64) bool {
	if f.lim != lim {
		lim.Reset(&f.state, now)
		f.lim = lim
	}
	return lim.Allow(&f.state, now, cost)
}

// offload queues the exact 5-tuple of p, with its rule's OffloadLimit, for
// TakeOffloads, if the kernel can match it as exactly.
func (e *Engine) offload(rs *ruleState, p *flows.Packet) {
	if p.NoPorts || p.Proto == flows.ProtoICMP || p.Proto == flows.ProtoICMPv6 {
		return
	}
	if e.nOff == offloadBuf {
		e.stats.OffloadsLost++
		return
	}
	var exact flows.KeyConfig
	exact.KeyTo(&e.offloads[e.nOff], p)
	e.offLims[e.nOff] = rs.off
	e.nOff++
	e.stats.Offloads++
}

// OffloadLimit is the token bucket the kernel may hold an offloaded flow
// to, per 5-tuple: never stricter than the flow's rule. Rate is per second
// and Burst the bucket's capacity, in packets, or bytes (IP length) when
// Bytes.
type OffloadLimit struct {
	Rate, Burst float64
	Bytes       bool
}

// offloadLimit is the bucket that accepts at least what a limiter of c
// accepts, over any interval: a token bucket its own (with Shape, the room
// of its queue too: burst + rate × MaxDelay), the window algorithms a rate
// of Limit per Window with a burst of 2×Limit (what an interval of length
// Window can hold at most).
func offloadLimit(c LimiterConfig, bytes bool) OffloadLimit {
	l := OffloadLimit{Rate: c.Rate, Burst: c.Burst, Bytes: bytes}
	switch c.Algorithm {
	case TokenBucket:
		l.Burst += c.Rate * float64(c.MaxDelay) / 1e9
	default:
		l.Burst = 2 * c.Rate * float64(c.Window) / 1e9
	}
	return l
}

// TakeOffloads calls fn for each flow reported since the last call (see
// Policy.OffloadAfter): its exact 5-tuple key (mode 5tuple, no prefixes)
// and the limit of the rule that dropped it.
func (e *Engine) TakeOffloads(fn func(k flows.Key, l OffloadLimit)) {
	for i := 0; i < e.nOff; i++ {
		fn(e.offloads[i], e.offLims[i])
	}
	e.nOff = 0
}

func (e *Engine) count(v Verdict) {
	if v == Accept {
		e.stats.Accepted++
	} else {
		e.stats.Dropped++
	}
}

// tableStats returns the flows held, evicted and expired by rs's table,
// which is nil for a rule that does not limit.
func (rs *ruleState) tableStats() (n, evictions, expired uint64, ok bool) {
	switch {
	case rs.table != nil:
		return uint64(rs.table.Len()), rs.table.Evictions(), rs.table.Expired(), true
	case rs.gtable != nil:
		return uint64(rs.gtable.Len()), rs.gtable.Evictions(), rs.gtable.Expired(), true
	}
	return 0, 0, 0, false
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	s := *e.stats
	for _, r := range e.rules {
		if n, ev, ex, ok := r.st.tableStats(); ok {
			s.Flows += n
			s.Evictions += ev
			s.Expired += ex
		}
	}
	return s
}

// Retire folds into the counters e shares with old (see Reload) the
// evictions and expirations of old's rules that e does not keep, so that
// the engine-wide counts never go down when a reload changes or removes a
// rule. Call it once, on the deciding goroutine, when e replaces old.
func (e *Engine) Retire(old *Engine) {
	if old == nil || old.stats != e.stats {
		return
	}
	kept := map[*ruleState]bool{}
	for _, r := range e.rules {
		kept[r.st] = true
	}
	for _, r := range old.rules {
		if t := r.st.table; t != nil && !kept[r.st] {
			e.stats.Evictions += t.Evictions()
			e.stats.Expired += t.Expired()
		}
	}
}

// MaxBytes is the most the flow tables can take, full (sliding-window
// logs: limit × 8 bytes per flow more).
func (e *Engine) MaxBytes() uint64 {
	var n uint64
	for _, r := range e.rules {
		switch t := r.st; {
		case t.table != nil:
			n += t.table.MaxBytes()
			if t.lim.algo == SlidingWindow {
				n += uint64(t.table.Max()) * uint64(t.lim.limit) * 8
			}
		case t.gtable != nil:
			n += t.gtable.MaxBytes()
		}
	}
	return n
}

// NumRules is the number of rules.
func (e *Engine) NumRules() int { return len(e.rules) }

// Rule returns rule i as the engine runs it.
func (e *Engine) Rule(i int) Rule { return e.rules[i].Rule }

// RuleStats returns rule i's counters.
func (e *Engine) RuleStats(i int) RuleStats {
	rs := e.rules[i].st
	s := rs.stats
	if n, ev, ex, ok := rs.tableStats(); ok {
		s.Flows, s.Evictions, s.Expired = n, ev, ex
	}
	return s
}

// FlowName formats a flow key made by rule i for people, with the rule's
// prefix lengths ("src 10.1.2.0/24"). Not for the per-packet path.
func (e *Engine) FlowName(i int, k flows.Key) string { return e.rules[i].st.key.Format(k) }

// FlowInfo is one flow as a listing shows it (AppendFlows).
type FlowInfo struct {
	// Rule is the index of the rule whose table holds the flow; Key is
	// the flow's key, made by that rule's Limit.Key (FlowName formats it).
	Rule int
	Key  flows.Key
	FlowStats
	// Last is the time of the flow's newest packet, ns since the Unix
	// epoch.
	Last int64
	// Expired: the flow has been idle for longer than the rule's flow
	// timeout; its next packet starts it afresh, and Left is then a fresh
	// flow's (Limiter.Capacity).
	Expired bool
	// Left is what the flow's limiter would accept now (Limiter.Left), in
	// the rule's cost units: packets, or bytes with Limit.Bytes.
	Left float64
}

// AppendFlows appends to dst the flows held in rule i's table, looking at
// at most max of its entry slots from slot from on (flows.Table.At), and
// returns the slot to go on from, or -1 when none is left. A rule without
// a table (accept, drop) has none. Called again and again between batches
// of packets, from 0 until it returns -1, it lists every flow held all
// along exactly once, and does not stall the packets for long: the time a
// call takes is bounded by max. now (the engine's clock) sets Left and
// Expired. It allocates only when dst must grow. Call it from the
// goroutine that decides packets.
func (e *Engine) AppendFlows(dst []FlowInfo, i, from, max int, now int64) ([]FlowInfo, int) {
	rs := e.rules[i].st
	t := rs.table
	if t == nil {
		return dst, -1
	}
	end := min(from+max, t.Slots())
	timeout := t.Timeout()
	for s := from; s < end; s++ {
		k, last, f, ok := t.At(s)
		if !ok {
			continue
		}
		fi := FlowInfo{Rule: i, Key: *k, FlowStats: f.stats, Last: last}
		if timeout > 0 && now-last > timeout {
			fi.Expired, fi.Left = true, rs.lim.Capacity()
		} else {
			fi.Left = rs.lim.Left(&f.state, now)
		}
		dst = append(dst, fi)
	}
	if end >= t.Slots() {
		return dst, -1
	}
	return dst, end
}

// Flows calls fn for each flow in the rules' tables, rule by rule, until fn
// returns false. Flows that were evicted or expired are not included.
func (e *Engine) Flows(fn func(rule int, k flows.Key, s FlowStats) bool) {
	for i, r := range e.rules {
		stop := false
		switch {
		case r.st.table != nil:
			r.st.table.Range(func(k flows.Key, _ int64, f *flow) bool {
				stop = !fn(i, k, f.stats)
				return !stop
			})
		case r.st.gtable != nil:
			r.st.gtable.Range(func(k flows.Key, _ int64, f *gflow) bool {
				stop = !fn(i, k, f.stats)
				return !stop
			})
		}
		if stop {
			return
		}
	}
}
