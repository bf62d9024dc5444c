package policy

import (
	"cmp"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"

	"github.com/gaissmai/bart"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// The classifier's builder: the rules' matches compiled into class
// bitsets by dimension (addresses, ports, ids, values).

// builder makes a classifier's class bitsets, each stored once: with more
// than one word, after a summary word (see classifier).
type builder struct {
	specs []ruleSpec
	words int
	sets  []uint64
	seen  map[string]int32
	key   []byte
}

func (b *builder) empty() []uint64 { return make([]uint64, b.words) }

// hdr is the number of words before a class's bitset: its summary.
func (b *builder) hdr() int {
	if b.words > 1 {
		return 1
	}
	return 0
}

// get returns the bitset of the class at off.
func (b *builder) get(off int32) []uint64 {
	return b.sets[int(off)+b.hdr() : int(off)+b.hdr()+b.words]
}

// shaper.MaxRules must fit the bits of one summary word.
const _ = uint(64*64 - shaper.MaxRules)

// intern returns the offset of bitset s in b.sets, adding it if new.
func (b *builder) intern(s []uint64) int32 {
	b.key = b.key[:0]
	for _, x := range s {
		b.key = binary.LittleEndian.AppendUint64(b.key, x)
	}
	if off, ok := b.seen[string(b.key)]; ok {
		return off
	}
	off := int32(len(b.sets))
	if b.words > 1 {
		// The summary: bit w is set iff word w is not zero.
		var sum uint64
		for w, x := range s {
			if x != 0 {
				sum |= 1 << w
			}
		}
		b.sets = append(b.sets, sum)
	}
	b.sets = append(b.sets, s...)
	b.seen[string(b.key)] = off
	return off
}

func setBit(s []uint64, i int) { s[i>>6] |= 1 << (i & 63) }

func or(dst, src []uint64) {
	for i := range dst {
		dst[i] |= src[i]
	}
}

// rulesWhere is the set of rules for which f holds.
func (b *builder) rulesWhere(f func(s *ruleSpec) bool) []uint64 {
	set := b.empty()
	for i := range b.specs {
		if f(&b.specs[i]) {
			setBit(set, i)
		}
	}
	return set
}

// dim returns, for a dimension whether a rule constrains it, the rules that
// do not (every class holds them), the limit and drop rules that do (the
// class of a packet whose value is unknown adds them), and whether any rule
// does.
func (b *builder) dim(has func(m *matchSpec) bool) (free, unknown []uint64, used bool) {
	free = b.rulesWhere(func(s *ruleSpec) bool { return !has(&s.match) })
	unknown = b.rulesWhere(func(s *ruleSpec) bool { return has(&s.match) && s.rule.Action != shaper.ActionAccept })
	for i := range b.specs {
		used = used || has(&b.specs[i].match)
	}
	or(unknown, free)
	return free, unknown, used
}

// fragDim is dim's unknown class for a non-first fragment: only the limit
// rules that constrain the dimension add to the free ones. Drop rules need
// not: the datagram's first fragment shows the real headers, and if a drop
// rule takes it, the datagram never reassembles; letting drop rules take
// every later fragment would drop every fragmented datagram of every port
// for one narrow drop rule.
func (b *builder) fragDim(has func(m *matchSpec) bool) []uint64 {
	f := b.rulesWhere(func(s *ruleSpec) bool { return !has(&s.match) || s.rule.Action == shaper.ActionLimit })
	return f
}

func build(specs []ruleSpec, ifaces map[string]uint32) *classifier {
	b := &builder{specs: specs, words: (len(specs) + 63) / 64, seen: map[string]int32{}}
	c := &classifier{words: b.words}

	if free, _, used := b.dim(func(m *matchSpec) bool { return m.family != 0 }); used {
		c.useFam = true
		for _, fam := range []flows.Class{flows.IPv4, flows.IPv6} {
			s := b.rulesWhere(func(s *ruleSpec) bool {
				return s.match.family == 4 && fam == flows.IPv4 || s.match.family == 6 && fam == flows.IPv6
			})
			or(s, free)
			c.fam[fam] = b.intern(s)
		}
		c.fam[flows.Malformed] = b.intern(b.empty())
	}
	c.src = b.addrDim(func(m *matchSpec) []netip.Prefix { return m.src })
	c.dst = b.addrDim(func(m *matchSpec) []netip.Prefix { return m.dst })

	if free, unknown, used := b.dim(func(m *matchSpec) bool { return m.proto != nil }); used {
		c.useProto = true
		c.protoFrag = b.intern(b.fragDim(func(m *matchSpec) bool { return m.proto != nil }))
		for v := range 256 {
			if v == flows.ProtoUnknown {
				// The protocol could not be found: limit and drop
				// rules' constraints hold, accept rules' do not.
				c.proto[v] = b.intern(unknown)
				continue
			}
			s := b.rulesWhere(func(s *ruleSpec) bool { return slices.Contains(s.match.proto, uint8(v)) })
			or(s, free)
			c.proto[v] = b.intern(s)
		}
	}
	c.sport = b.portDim(func(m *matchSpec) []portRange { return m.sport })
	c.dport = b.portDim(func(m *matchSpec) []portRange { return m.dport })

	ids := func(names []string) []uint32 {
		var out []uint32
		for _, n := range names {
			if id := ifaces[n]; id != 0 {
				out = append(out, id)
			}
		}
		return out
	}
	c.iif = b.valueDim(func(m *matchSpec) ([]uint32, bool) { return ids(m.iif), m.iif != nil })
	c.oif = b.valueDim(func(m *matchSpec) ([]uint32, bool) { return ids(m.oif), m.oif != nil })
	c.queue = b.valueDim(func(m *matchSpec) ([]uint32, bool) {
		out := make([]uint32, len(m.queue))
		for i, q := range m.queue {
			out[i] = uint32(q)
		}
		return out, m.queue != nil
	})

	c.uid = b.idDim(func(m *matchSpec) []idRange { return m.uid })
	c.gid = b.idDim(func(m *matchSpec) []idRange { return m.gid })
	b.buildL4(c)

	if free, _, used := b.dim(func(m *matchSpec) bool { return m.hasMark }); used {
		d := &markDim{none: b.intern(free)}
		type pair struct{ val, mask uint32 }
		var order []pair
		rules := map[pair][]uint64{}
		for i := range specs {
			m := &specs[i].match
			if !m.hasMark {
				continue
			}
			k := pair{m.mark, m.markMask}
			if rules[k] == nil {
				rules[k] = b.empty()
				order = append(order, k)
			}
			setBit(rules[k], i)
		}
		for _, k := range order {
			d.ents = append(d.ents, markEnt{k.val, k.mask, b.intern(rules[k])})
		}
		c.marks = d
	}
	c.sets = b.sets
	return c
}

func (b *builder) addrDim(get func(m *matchSpec) []netip.Prefix) addrDim {
	free, _, used := b.dim(func(m *matchSpec) bool { return get(m) != nil })
	if !used {
		return addrDim{}
	}
	own := map[netip.Prefix][]int{}
	var all []netip.Prefix
	for i := range b.specs {
		for _, p := range get(&b.specs[i].match) {
			if own[p] == nil {
				all = append(all, p)
			}
			own[p] = append(own[p], i)
		}
	}
	// Shorter prefixes first: when a prefix is reached, every prefix of
	// the set containing it has its class, and the longest of them
	// (found by LookupPrefix before the prefix itself is inserted) has
	// the union of them all.
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		return cmp.Or(cmp.Compare(a.Bits(), b.Bits()), a.Addr().Compare(b.Addr()))
	})
	var acc bart.Table[int32]
	classes := make([]int32, len(all))
	for k, p := range all {
		s := b.empty()
		if parent, ok := acc.LookupPrefix(p); ok {
			copy(s, b.get(parent))
		} else {
			copy(s, free)
		}
		for _, i := range own[p] {
			setBit(s, i)
		}
		classes[k] = b.intern(s)
		acc.Insert(p, classes[k])
	}
	d := addrDim{on: true}
	none := b.intern(free)
	d.v4.none, d.v6.none = none, none
	var n4, n6 int
	for _, p := range all {
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
	}
	if n4 > linPrefixes {
		d.v4.tbl = new(bart.Fast[int32])
	}
	if n6 > linPrefixes {
		d.v6.tbl = new(bart.Fast[int32])
	}
	// Longest first for the scans.
	for k := len(all) - 1; k >= 0; k-- {
		p, off := all[k], classes[k]
		a := p.Addr()
		switch {
		case a.Is4() && d.v4.tbl != nil:
			d.v4.tbl.Insert(p, off)
		case a.Is4():
			x := a.As4()
			mask := uint32(math.MaxUint32) << (32 - p.Bits())
			if p.Bits() == 0 {
				mask = 0
			}
			d.v4.lin4 = append(d.v4.lin4, lin4{binary.BigEndian.Uint32(x[:]), mask, off})
		case d.v6.tbl != nil:
			d.v6.tbl.Insert(p, off)
		default:
			x := a.As16()
			mhi, mlo := mask128(p.Bits())
			d.v6.lin6 = append(d.v6.lin6, lin6{binary.BigEndian.Uint64(x[:8]), binary.BigEndian.Uint64(x[8:]), mhi, mlo, off})
		}
	}
	return d
}

// mask128 is the netmask of an IPv6 prefix length, as two halves.
func mask128(n int) (hi, lo uint64) {
	switch {
	case n == 0:
		return 0, 0
	case n <= 64:
		return math.MaxUint64 << (64 - n), 0
	case n == 128:
		return math.MaxUint64, math.MaxUint64
	}
	return math.MaxUint64, math.MaxUint64 << (128 - n)
}

func (b *builder) portDim(get func(m *matchSpec) []portRange) portDim {
	free, unknown, used := b.dim(func(m *matchSpec) bool { return get(m) != nil })
	if !used {
		return portDim{}
	}
	d := portDim{on: true, none: b.intern(free), unknown: b.intern(unknown),
		frag: b.intern(b.fragDim(func(m *matchSpec) bool { return get(m) != nil }))}
	d.bounds, d.offs = rangeCover(b, get, portBounds, free)
	if starts := d.bounds; len(starts) > linPorts {
		d.table = make([]uint16, 1<<16)
		for k, s := range starts {
			end := 1 << 16
			if k+1 < len(starts) {
				end = int(starts[k+1])
			}
			for port := int(s); port < end; port++ {
				d.table[port] = uint16(k)
			}
		}
	}
	return d
}

// rangeCover cuts a range dimension at each start (0, and where one of
// get's ranges of a rule begins or ends) and returns the starts, sorted,
// and each interval's rules, interned: free (the rules without the
// constraint) and those whose ranges (merged with bounds) cover the interval.
func rangeCover[R any, T uint16 | uint32](b *builder, get func(m *matchSpec) []R, bounds func(*R) (lo, hi *T), free []uint64) ([]T, []int32) {
	starts := []T{0}
	for i := range b.specs {
		for _, r := range get(&b.specs[i].match) {
			lo, hi := bounds(&r)
			starts = append(starts, *lo)
			if *hi < ^T(0) {
				starts = append(starts, *hi+1)
			}
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	cover := make([][]uint64, len(starts))
	for k := range cover {
		cover[k] = slices.Clone(free)
	}
	for i := range b.specs {
		for _, r := range mergeRanges(get(&b.specs[i].match), bounds) {
			lo, hi := bounds(&r)
			a, _ := slices.BinarySearch(starts, *lo)
			for k := a; k < len(starts) && starts[k] <= *hi; k++ {
				setBit(cover[k], i)
			}
		}
	}
	offs := make([]int32, len(starts))
	for k := range starts {
		offs[k] = b.intern(cover[k])
	}
	return starts, offs
}

// idDim is the uid or gid dimension, made as portDim's intervals; an
// ownerless packet's class is the rules without the constraint.
func (b *builder) idDim(get func(m *matchSpec) []idRange) idDim {
	free, _, used := b.dim(func(m *matchSpec) bool { return get(m) != nil })
	if !used {
		return idDim{}
	}
	d := idDim{on: true, none: b.intern(free)}
	d.bounds, d.offs = rangeCover(b, get, idBounds, free)
	return d
}

func (b *builder) valueDim(get func(m *matchSpec) ([]uint32, bool)) valueDim {
	free, _, used := b.dim(func(m *matchSpec) bool { _, ok := get(m); return ok })
	if !used {
		return valueDim{}
	}
	d := valueDim{on: true, none: b.intern(free)}
	rules := map[uint32][]uint64{}
	for i := range b.specs {
		vs, _ := get(&b.specs[i].match)
		for _, v := range vs {
			if rules[v] == nil {
				rules[v] = slices.Clone(free)
				d.keys = append(d.keys, v)
			}
			setBit(rules[v], i)
		}
	}
	slices.Sort(d.keys)
	for _, v := range d.keys {
		d.offs = append(d.offs, b.intern(rules[v]))
	}
	return d
}
