// Package offload holds flooding flows to their limit in the kernel instead
// of in the queue.
//
// When the shaper has dropped a flow's packets many times in a row
// (shaper.Policy.OffloadAfter), the live path hands the flow's exact 5-tuple
// and its rule's limit (shaper.OffloadLimit) to Add. A background goroutine
// pushes it, in batches, into an nftables set as an element with a timeout
// and a limit of its own ("limit rate over R/second burst B packets|bytes",
// then a counter); a rule ahead of the queue rule (scripts/rules.sh add ...
// --offload) runs the element's limit on each of the flow's packets: those
// over it are dropped in the kernel, a set lookup instead of a trip through
// NFQUEUE; those under it go on to the queue as before, where the shaper
// still decides them.
//
//	o, err := offload.Open(offload.Config{Timeout: 2 * time.Second})
//	if err != nil { ... }   // one line: missing sets and how to add them, permissions
//	defer o.Close()         // deletes every element it added that is still live
//	...
//	engine.TakeOffloads(o.Add) // after each batch; never blocks, never allocates
//
// # What an offloaded flow gets
//
// What is offloaded is the exact 5-tuple of one of the flow's dropped packets
// (flows.Key with Mode FiveTuple, no prefixes): TCP, UDP, UDP-Lite and SCTP
// by source and destination address, protocol and ports (sets ports4,
// ports6), other protocols except ICMP and ICMPv6 by addresses and protocol
// (sets noports4, noports6). Such a tuple belongs to one flow of the rule
// that dropped it, whatever that rule's key mode, so no other flow of that
// rule loses packets. The kernel holds the tuple to a token bucket never
// stricter than the rule (shaper.OffloadLimit: the rule's rate ×
// shaper.OffloadHeadroom, so that the shaper's bucket alone decides, and
// its burst; for a shaping rule the room of its queue too; for the window algorithms a
// burst of two windows' limit): a flow that floods once and then sends under
// its limit gets what its limit allows, and packets with a spoofed copy of a
// flow's tuple take from the kernel's bucket what they would have taken from
// the shaper's. What the kernel passes, the shaper still counts and limits
// exactly; what it drops, packetshaper does not count: each element and the
// rule carry an nft counter instead (`nft list table inet
// packetshaper_offload`, KernelDrops; the kernel counts each of an
// element's drops twice on 6.18).
//
// An element goes Timeout after it was added, unless refreshed: at every
// tick (a quarter of Timeout) the Offloader reads the sets and adds again,
// timeout restarted, the elements whose counter went up (the kernel dropped
// some of their packets), and the shaper's new reports of a live flow do
// the same. So an element outlives the last drop it made by at most
// Timeout, and packetshaper's end (a kill included) by at most Timeout:
// nothing it installed limits a flow longer than MaxTimeout after it died.
// Open flushes the sets (what a killed packetshaper left goes at once), and
// Close deletes what this Offloader added. Only flows an enforcing rule
// drops are offloaded: never for shadow rules, marking rules or accept
// rules (the engine reports only those).
//
// The kernel matches the tuple alone. Non-first fragments carry no ports:
// the kernel cannot match them in ports4/ports6, and they still reach the
// queue. And a policy that classifies the packets of one tuple into
// different rules by something else (mark, interface, queue) would see them
// all held to one rule's limit (the daemon refuses --offload with such a
// policy).
//
// # Kernel objects
//
// Table inet Table (default DefaultTable, the name scripts/rules.sh uses)
// with four sets, flags dynamic,timeout, a default timeout of MaxTimeout:
//
//	ports4   ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service
//	noports4 ipv4_addr . ipv4_addr . inet_proto
//	ports6   ipv6_addr . ipv6_addr . inet_proto . inet_service . inet_service
//	noports6 ipv6_addr . ipv6_addr . inet_proto
//
// and rules.sh's base chains (one per hook it was asked for, priority -20)
// holding "<queue rule's match> ip saddr . ip daddr . meta l4proto . th sport
// . th dport @ports4 add @ports4 { ip saddr . ip daddr . meta l4proto . th
// sport . th dport limit rate over 4000000000/second } counter drop" and the
// like. The lookup matches only the elements packetshaper added; the "add"
// statement finds that element and runs its limit (it creates an element
// only in the instant an element expires between the two, and then one
// that limits nothing and goes within MaxTimeout). Open checks that the
// sets exist with these key types and flushes them; it creates nothing.
// Elements it adds carry the limit and a counter (google/nftables v0.3.0
// cannot send those: elems_linux.go does, on a netlink socket of its own).
//
// Besides nfq (nfnetlink_queue) and failopen (reading rule counters), this
// is the one package that speaks netlink (nftables): the only one writing.
package offload

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/packetshaper/packetshaper/flows"
)

// DefaultTable is the nft table (family inet) that holds the sets and the
// drop rules; scripts/rules.sh's OFF_TABLE is the same name.
const DefaultTable = "packetshaper_offload"

// Defaults for zero Config fields.
const (
	// DefaultTimeout is how long an element holds its flow to its limit
	// after it was added or last refreshed.
	DefaultTimeout = 2 * time.Second
	// MaxTimeout bounds Config.Timeout, and is the sets' default timeout
	// (scripts/rules.sh): nothing packetshaper installed limits a flow
	// longer than this after packetshaper died.
	MaxTimeout = 10 * time.Second
	// DefaultBuffer is how many keys Add can hold for the background
	// goroutine.
	DefaultBuffer = 4096
)

// Set names and their key types, as scripts/rules.sh creates them.
const (
	setPorts4 = iota
	setNoPorts4
	setPorts6
	setNoPorts6
	numSets
)

var (
	setNames = [numSets]string{"ports4", "noports4", "ports6", "noports6"}
	setTypes = [numSets]string{
		"ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service",
		"ipv4_addr . ipv4_addr . inet_proto",
		"ipv6_addr . ipv6_addr . inet_proto . inet_service . inet_service",
		"ipv6_addr . ipv6_addr . inet_proto",
	}
	// keyLens are the element key lengths: in a concatenation every field
	// takes a whole number of 4-byte registers.
	keyLens = [numSets]int{20, 12, 44, 36}
)

// maxKeyLen is the longest element key (ports6).
const maxKeyLen = 44

// ErrNoSets is matched (errors.Is) by Open's error when the table or one of
// its sets is missing or has another key type.
var ErrNoSets = errors.New("offload: sets missing or of another type")

// Config configures an Offloader. The zero value is valid: every field says
// what 0 means. Open never writes to it.
type Config struct {
	// Timeout is how long an element holds its flow to its limit in the
	// kernel after it was added or refreshed (0: DefaultTimeout). From a
	// millisecond, the kernel's unit, to MaxTimeout.
	Timeout time.Duration
	// Table is the nft table, family inet ("": DefaultTable).
	Table string
	// Buffer is how many keys Add can hold until the background goroutine
	// takes them (0: DefaultBuffer); more are counted as Lost.
	Buffer int
	// Logf, if not nil, logs the kernel's refusals (at most one line every
	// 10 s) and what Close could not delete.
	Logf func(format string, args ...any)
}

// Stats counts what an Offloader did. Safe to read from any goroutine.
type Stats struct {
	// Offloaded counts elements added for flows that were not offloaded
	// (as far as the Offloader knows).
	Offloaded uint64
	// Refreshed counts elements added again, timeout restarted: those
	// whose limit dropped packets since the last tick, and flows the
	// shaper reported again while their element may still be live, but
	// too late to be packets queued before it was added.
	Refreshed uint64
	// Skipped counts reports of flows offloaded moments before (packets
	// that were already queued) and repeats within a batch: nothing sent.
	Skipped uint64
	// Active is how many elements it added that have not expired, as far
	// as it knows.
	Active uint64
	// Lost counts keys Add found no room for (buffer full, or after Close);
	// Full, keys not added because the set already held Size elements of
	// this Offloader; Invalid, keys that are not an exact 5-tuple of an
	// offloadable protocol, or whose limit is no limit (rate or burst 0).
	Lost, Full, Invalid uint64
	// Errors counts elements whose batch the kernel refused (no table, set
	// full of other elements, ...); they are not offloaded.
	Errors uint64
}

type counters struct {
	offloaded, refreshed, skipped, active, lost, full, invalid, errors atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{
		Offloaded: c.offloaded.Load(), Refreshed: c.refreshed.Load(), Skipped: c.skipped.Load(),
		Active: c.active.Load(), Lost: c.lost.Load(), Full: c.full.Load(), Invalid: c.invalid.Load(),
		Errors: c.errors.Load(),
	}
}

// isPortProto reports whether the kernel matches the protocol's packets by
// ports (th sport, th dport): the protocols flows reads ports of, but ICMP.
func isPortProto(p uint8) bool {
	switch p {
	case flows.ProtoTCP, flows.ProtoUDP, flows.ProtoUDPLite, flows.ProtoSCTP:
		return true
	}
	return false
}

// encodeKey writes the element key of k to b: which set it belongs to, and
// its length. ok is false for a key that is not the exact 5-tuple of an
// offloadable packet (another mode, ICMP, ports on a protocol without).
//
// The layout is nft's concatenation: each field starts a 4-byte register and
// is zero-padded to it; addresses and ports in network byte order.
//
//	saddr (4|16) . daddr (4|16) . proto, 0, 0, 0 . sport, 0, 0 . dport, 0, 0
func encodeKey(k *flows.Key, b *[maxKeyLen]byte) (set, n int, ok bool) {
	if k.Mode != flows.FiveTuple || k.Proto == flows.ProtoICMP || k.Proto == flows.ProtoICMPv6 {
		return 0, 0, false
	}
	alen := 4
	switch k.Family {
	case 4:
		set = setPorts4
	case 6:
		set, alen = setPorts6, 16
	default:
		return 0, 0, false
	}
	ports := isPortProto(k.Proto)
	if !ports {
		if k.SrcPort != 0 || k.DstPort != 0 {
			return 0, 0, false
		}
		set++ // setNoPorts4, setNoPorts6
	}
	*b = [maxKeyLen]byte{}
	copy(b[:alen], k.Src[:alen])
	copy(b[alen:2*alen], k.Dst[:alen])
	i := 2 * alen
	b[i] = k.Proto
	i += 4
	if ports {
		b[i], b[i+1] = byte(k.SrcPort>>8), byte(k.SrcPort)
		b[i+4], b[i+5] = byte(k.DstPort>>8), byte(k.DstPort)
		i += 8
	}
	return set, i, true
}
