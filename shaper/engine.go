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
	return 0, fmt.Errorf("shaper: unknown verdict %q (want accept or drop)", s)
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

// Config describes an Engine. Zero fields mean the documented defaults;
// New never writes them back.
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
	// Malformed is the verdict for packets that do not decode as IP
	// (default Accept).
	Malformed Verdict
}

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
	return lc
}

// Stats counts what an Engine has decided. Packets = Accepted + Dropped;
// Malformed packets are counted there too, with the verdict they got.
type Stats struct {
	Packets, Accepted, Dropped, Malformed uint64
	// Flows is the number of flows in the table now.
	Flows uint64
	// Evictions counts live flows pushed out of a full table; Expired,
	// flows forgotten after FlowTimeout idle.
	Evictions, Expired uint64
}

// FlowStats counts one flow's packets since it entered the table.
type FlowStats struct {
	Packets, Accepted, Dropped uint64
}

type flow struct {
	state State
	stats FlowStats
}

// Engine decides packets. It is not safe for concurrent use: give each
// packet source (each NFQUEUE queue) its own, and call Stats and Flows from
// the goroutine that calls Decide.
type Engine struct {
	lim       *Limiter
	key       flows.KeyConfig
	bytes     bool
	malformed Verdict
	table     *flows.Table[flow]
	stats     Stats
}

// New checks c and returns an Engine for it.
func New(c Config) (*Engine, error) {
	if c.Bytes && c.Algorithm == SlidingWindow {
		return nil, fmt.Errorf("shaper: sliding-window counts packets; with a bit rate use sliding-window-counter, fixed-window or token-bucket")
	}
	lc := c.LimiterConfig()
	if c.Bytes {
		// A byte budget below one full-size packet drops such packets
		// forever: refuse it rather than shape by surprise.
		switch {
		case lc.Algorithm == TokenBucket && lc.Burst < MinByteBudget:
			return nil, fmt.Errorf("shaper: a burst of %v bytes is below one full-size packet (%d bytes): larger packets could never pass", lc.Burst, MinByteBudget)
		case lc.Algorithm != TokenBucket && lc.Rate*float64(lc.Window)/1e9 < MinByteBudget:
			return nil, fmt.Errorf("shaper: rate × window is %.0f bytes, below one full-size packet (%d bytes): larger packets could never pass; raise the rate or the window", lc.Rate*float64(lc.Window)/1e9, MinByteBudget)
		}
	}
	if c.MaxFlows < 0 {
		return nil, fmt.Errorf("shaper: max flows must not be negative")
	}
	if c.Malformed > Drop {
		return nil, fmt.Errorf("shaper: unknown verdict %d", c.Malformed)
	}
	if err := c.Key.Validate(); err != nil {
		return nil, err
	}
	lim, err := NewLimiter(lc)
	if err != nil {
		return nil, err
	}
	maxFlows := c.MaxFlows
	if maxFlows == 0 {
		maxFlows = flows.DefaultMaxFlows
	}
	if lc.Algorithm == SlidingWindow && float64(maxFlows)*float64(lim.limit)*8 > MaxLogBytes {
		return nil, fmt.Errorf("shaper: sliding-window keeps %d timestamps (8 bytes each) for each of up to %d flows: %.1f GiB, over the %d GiB cap; lower max flows or the limit, or use sliding-window-counter",
			lim.limit, maxFlows, float64(maxFlows)*float64(lim.limit)*8/(1<<30), MaxLogBytes>>30)
	}
	timeout := c.FlowTimeout
	if timeout == 0 {
		timeout = DefaultFlowTimeout
	}
	return &Engine{
		lim:       lim,
		key:       c.Key,
		bytes:     c.Bytes,
		malformed: c.Malformed,
		table:     flows.NewTable[flow](c.MaxFlows, timeout),
	}, nil
}

// Result is a decision with what it was made on.
type Result struct {
	Verdict Verdict
	// Malformed is true when the packet did not decode; Key is then zero.
	Malformed bool
	Key       flows.Key
}

// Decide decodes pkt, which starts at the IP header, finds its flow and
// returns its verdict at time now (nanoseconds since the Unix epoch). It does
// not allocate once the flow table has grown to its working size.
func (e *Engine) Decide(pkt []byte, now int64) Verdict {
	var k flows.Key
	v, _ := e.decide(pkt, now, &k)
	return v
}

// DecideResult is Decide that also tells which flow the packet was counted
// against.
func (e *Engine) DecideResult(pkt []byte, now int64) (r Result) {
	r.Verdict, r.Malformed = e.decide(pkt, now, &r.Key)
	return r
}

// decide is Decide writing the flow key to *k (left zero for a malformed
// packet). Results are written in place rather than returned as a struct:
// a returned composite is built in a temporary and copied, which cost more
// than the whole limiter.
func (e *Engine) decide(pkt []byte, now int64, k *flows.Key) (Verdict, bool) {
	var p flows.Packet
	p.Decode(pkt)
	e.stats.Packets++
	if p.Class == flows.Malformed {
		e.stats.Malformed++
		e.count(e.malformed)
		return e.malformed, true
	}
	e.key.KeyTo(k, &p)
	f, fresh := e.table.Get(k, now)
	if fresh {
		e.lim.Reset(&f.state, now)
		f.stats = FlowStats{}
	}
	cost := int64(1)
	if e.bytes {
		cost = int64(p.Length)
	}
	f.stats.Packets++
	if e.lim.Allow(&f.state, now, cost) {
		f.stats.Accepted++
		e.stats.Accepted++
		return Accept, false
	}
	f.stats.Dropped++
	e.stats.Dropped++
	return Drop, false
}

func (e *Engine) count(v Verdict) {
	if v == Accept {
		e.stats.Accepted++
	} else {
		e.stats.Dropped++
	}
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Flows = uint64(e.table.Len())
	s.Evictions = e.table.Evictions()
	s.Expired = e.table.Expired()
	return s
}

// FlowName formats a flow key made by this engine for people, with the
// key mode's prefix lengths ("src 10.1.2.0/24"). Not for the per-packet path.
func (e *Engine) FlowName(k flows.Key) string { return e.key.Format(k) }

// Flows calls fn for each flow in the table, most recently used first, until
// fn returns false. Flows that were evicted or expired are not included.
func (e *Engine) Flows(fn func(k flows.Key, s FlowStats) bool) {
	e.table.Range(func(k flows.Key, _ int64, f *flow) bool { return fn(k, f.stats) })
}
