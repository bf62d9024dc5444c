package policy

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/gaissmai/bart"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// classifier is the compiled match tables of a policy (shaper.Classifier).
//
// Each field a rule may constrain is a dimension. For a packet, each
// dimension that some rule uses yields a class: the set of rules that the
// packet's value of that field satisfies, rules without a constraint on the
// field included. A class is a bitset over the rules (words uint64s),
// stored once in sets and named by its offset there. The packet's rule is
// the lowest bit set in the AND of its classes. With more than 64 rules
// each class starts with a summary word whose bit w says that its word w is
// not zero; the AND of the summaries names the words worth ANDing, lowest
// first, so that a packet costs a few words whatever the number of rules.
//
// Lookups per dimension: the family and the protocol by a table; ports by a
// scan of a few interval bounds, or with many bounds a 65536-entry table;
// addresses by a scan of the prefixes longest first, or with many a
// gaissmai/bart prefix table, whose longest-prefix match returns the class
// precomputed for that prefix (its rules and those of every shorter prefix
// of the set containing it, so one lookup answers for all of them); queues
// interface ids, uids and gids by binary search; marks by a scan of the distinct
// value/mask pairs. Nothing allocates; the classifier is read-only and safe
// for concurrent use by the engines of several queues.
type classifier struct {
	words int
	sets  []uint64

	useFam bool
	fam    [3]int32 // by flows.Class

	src, dst addrDim

	useProto bool
	proto    [256]int32
	// protoFrag is the protocol class of an IPv6 later fragment, whose
	// protocol is unknown (see builder.fragDim).
	protoFrag int32

	sport, dport    portDim
	iif, oif, queue valueDim
	uid, gid        idDim
	marks           *markDim

	// tcp-flags, icmp-type (ICMP types, then ICMPv6's at 256+), length,
	// dscp and ct-state (l4match.go).
	tcpFlags, icmpType, dscp, ct byteDim
	length                       idDim
}

// maxDims is the number of dimensions a packet is looked up in, marks
// aside.
const maxDims = 16

// Thresholds between a linear scan and a table, from BenchmarkLookup: a
// scan of up to this many entries is as fast as the table's lookup. A
// prefix scan beats bart below some 16 to 32 prefixes; the port table
// (128 KiB, a load) beats a scan of every size but the trivial. Read only
// by Compile (variables so that the benchmark can move them).
var (
	linPrefixes = 16
	linPorts    = 2
)

// zeroMeta stands for a nil *shaper.Meta.
var zeroMeta shaper.Meta

// Classify returns the index of the first rule that matches p with m, or -1.
func (c *classifier) Classify(p *flows.Packet, m *shaper.Meta) int {
	if p.Class == flows.Malformed {
		return -1
	}
	if m == nil {
		m = &zeroMeta
	}
	var offs [maxDims]int32
	n := 0
	if c.useFam {
		offs[n] = c.fam[p.Class]
		n++
	}
	if c.src.on {
		offs[n] = c.src.lookup(p.Class, &p.Src)
		n++
	}
	if c.dst.on {
		offs[n] = c.dst.lookup(p.Class, &p.Dst)
		n++
	}
	if c.useProto {
		if p.Fragment && p.Proto == flows.ProtoUnknown {
			offs[n] = c.protoFrag
		} else {
			offs[n] = c.proto[p.Proto]
		}
		n++
	}
	if c.sport.on || c.dport.on {
		// Ports count only for the protocols that have them. When they
		// are hidden (a fragment, a header cut short, an extension
		// header chain not walked to its end) the packet is in the
		// "unknown" class: it meets the port constraints of the rules
		// that limit or drop, and not those of accept rules; a later
		// fragment meets only those of limit rules (builder.fragDim).
		known, unknown := hasPorts(p.Proto), false
		if p.NoPorts && (known || p.Proto == flows.ProtoUnknown) {
			known, unknown = false, true
		}
		for _, d := range [2]*portDim{&c.sport, &c.dport} {
			if !d.on {
				continue
			}
			switch {
			case known:
				port := p.SrcPort
				if d == &c.dport {
					port = p.DstPort
				}
				offs[n] = d.lookup(port)
			case unknown && p.Fragment:
				offs[n] = d.frag
			case unknown:
				offs[n] = d.unknown
			default:
				offs[n] = d.none
			}
			n++
		}
	}
	if c.iif.on {
		offs[n] = c.iif.lookup(m.InIf)
		n++
	}
	if c.oif.on {
		offs[n] = c.oif.lookup(m.OutIf)
		n++
	}
	if c.queue.on {
		offs[n] = c.queue.lookup(uint32(m.Queue))
		n++
	}
	if c.uid.on {
		offs[n] = c.uid.lookup(m.UID, m.HasOwner)
		n++
	}
	if c.gid.on {
		offs[n] = c.gid.lookup(m.GID, m.HasOwner)
		n++
	}
	n = c.l4Lookups(p, m, &offs, n)
	sets := c.sets
	if c.words == 1 {
		acc := ^uint64(0)
		for _, o := range offs[:n] {
			acc &= sets[o]
		}
		if acc != 0 && c.marks != nil {
			acc &= c.marks.word(sets, m.Mark, 0)
		}
		if acc == 0 {
			return -1
		}
		return bits.TrailingZeros64(acc)
	}
	// The AND of the summaries names the words that may hold a match.
	cand := ^uint64(0)
	for _, o := range offs[:n] {
		cand &= sets[o]
	}
	if cand != 0 && c.marks != nil {
		cand &= c.marks.word(sets, m.Mark, 0)
	}
	for cand != 0 {
		w := bits.TrailingZeros64(cand)
		cand &= cand - 1
		acc := ^uint64(0)
		for _, o := range offs[:n] {
			acc &= sets[int(o)+1+w]
		}
		if acc != 0 && c.marks != nil {
			acc &= c.marks.word(sets, m.Mark, 1+w)
		}
		if acc != 0 {
			return w<<6 + bits.TrailingZeros64(acc)
		}
	}
	return -1
}

// addrDim is the source or destination address dimension.
type addrDim struct {
	on     bool
	v4, v6 prefixSet
}

func (d *addrDim) lookup(c flows.Class, a *[16]byte) int32 {
	if c == flows.IPv4 {
		return d.v4.lookup4(a)
	}
	return d.v6.lookup6(a)
}

// prefixSet is one family's prefixes of a dimension.
type prefixSet struct {
	none int32 // no prefix contains the address
	lin4 []lin4
	lin6 []lin6
	tbl  *bart.Fast[int32]
}

// lin4 and lin6 are prefixes for the scan, longest first.
type lin4 struct {
	net, mask uint32
	off       int32
}

type lin6 struct {
	hi, lo, mhi, mlo uint64
	off              int32
}

func (s *prefixSet) lookup4(a *[16]byte) int32 {
	if s.tbl != nil {
		if v, ok := s.tbl.Lookup(netip.AddrFrom4([4]byte(a[:4]))); ok {
			return v
		}
		return s.none
	}
	x := binary.BigEndian.Uint32(a[:4])
	for i := range s.lin4 {
		if e := &s.lin4[i]; x&e.mask == e.net {
			return e.off
		}
	}
	return s.none
}

func (s *prefixSet) lookup6(a *[16]byte) int32 {
	if s.tbl != nil {
		if v, ok := s.tbl.Lookup(netip.AddrFrom16(*a)); ok {
			return v
		}
		return s.none
	}
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	for i := range s.lin6 {
		if e := &s.lin6[i]; hi&e.mhi == e.hi && lo&e.mlo == e.lo {
			return e.off
		}
	}
	return s.none
}

// portDim is the source or destination port dimension. The port space is
// cut into intervals at every range's bounds; all ports of an interval are
// in the same class.
type portDim struct {
	on bool
	// none: the protocol has no ports. unknown: it may have, but they
	// could not be read; frag: the same for a non-first fragment.
	none, unknown, frag int32
	bounds              []uint16 // interval starts, ascending; bounds[0] == 0
	offs                []int32  // class of each interval
	table               []uint16 // port -> interval, with many intervals
}

func (d *portDim) lookup(port uint16) int32 {
	if d.table != nil {
		return d.offs[d.table[port]]
	}
	k := 0
	for k+1 < len(d.bounds) && d.bounds[k+1] <= port {
		k++
	}
	return d.offs[k]
}

// valueDim matches a value against sorted distinct values (queues,
// interface ids).
type valueDim struct {
	on   bool
	none int32
	keys []uint32
	offs []int32
}

func (d *valueDim) lookup(v uint32) int32 {
	keys := d.keys
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if keys[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(keys) && keys[lo] == v {
		return d.offs[lo]
	}
	return d.none
}

// idDim is the uid or gid dimension: the id space cut into intervals at
// every range's bounds, as portDim's, found by binary search. A packet
// without an owner meets no rule's constraint: none is the rules without
// one.
type idDim struct {
	on     bool
	none   int32
	bounds []uint32 // interval starts, ascending; bounds[0] == 0
	offs   []int32  // class of each interval
}

func (d *idDim) lookup(id uint32, known bool) int32 {
	if !known {
		return d.none
	}
	lo, hi := 0, len(d.bounds)
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if d.bounds[m] <= id {
			lo = m
		} else {
			hi = m
		}
	}
	return d.offs[lo]
}

// markDim holds the distinct value/mask pairs of the rules' marks. A packet
// may satisfy several, so its class is an OR, made a word at a time.
type markDim struct {
	none int32 // rules without a mark constraint
	ents []markEnt
}

type markEnt struct {
	val, mask uint32
	off       int32 // the rules with this pair
}

// word returns word w of the packet's mark class, counting the summary
// (the OR of the summaries) as a word.
func (d *markDim) word(sets []uint64, mark uint32, w int) uint64 {
	x := sets[int(d.none)+w]
	for i := range d.ents {
		if e := &d.ents[i]; mark&e.mask == e.val {
			x |= sets[int(e.off)+w]
		}
	}
	return x
}
