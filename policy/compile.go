package policy

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gaissmai/bart"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// Options says how Compile resolves what the file names.
type Options struct {
	// IfIndex resolves an interface name to the index that packets'
	// shaper.Meta carries (live: net.InterfaceByName(name).Index). nil
	// (replay): each name the rules use gets an id of its own, 1, 2, ...
	// in order of first use, which IfaceID returns.
	IfIndex func(name string) (uint32, bool)
}

// Compiled is a File made ready for the engine. It is immutable; its
// classifier is safe for concurrent use.
type Compiled struct {
	file      *File
	opts      Options
	rules     []shaper.Rule
	redis     *Redis
	cls       *classifier
	ifaces    map[string]uint32
	warnings  []string
	metaRules []string
}

// Compile checks f (as Validate) and compiles its rules and match tables.
// An interface named in iif or oif that IfIndex does not know is not an
// error: the rule's constraint matches no packet on it, until a reload, and
// Warnings says so.
func (f *File) Compile(o Options) (*Compiled, error) {
	specs, err := f.check()
	if err != nil {
		return nil, err
	}
	c := &Compiled{file: f, opts: o, ifaces: map[string]uint32{}, redis: f.Redis.WithDefaults()}
	global := false
	for i := range specs {
		global = global || specs[i].rule.Limit.Global
	}
	if c.redis != nil && !global {
		c.warnings = append(c.warnings, "[redis]: no rule is global (scope = \"global\"): the store is not used")
	}
	for i := range specs {
		if w := specs[i].warn; w != "" {
			c.warnings = append(c.warnings, w)
		}
	}
	for i := range specs {
		s := &specs[i]
		s.rule.Match = s.match.canonical()
		c.rules = append(c.rules, s.rule)
		if m := &s.match; m.hasMark || m.iif != nil || m.oif != nil || m.queue != nil || m.uid != nil || m.gid != nil {
			c.metaRules = append(c.metaRules, s.rule.Name)
		}
		for _, names := range [][]string{s.match.iif, s.match.oif} {
			for _, name := range names {
				if _, ok := c.ifaces[name]; ok {
					continue
				}
				if o.IfIndex == nil {
					c.ifaces[name] = uint32(len(c.ifaces) + 1)
					continue
				}
				id, ok := o.IfIndex(name)
				if !ok || id == 0 {
					id = 0
				}
				c.ifaces[name] = id
			}
		}
	}
	for i := range specs {
		s := &specs[i]
		for _, d := range []struct {
			field string
			names []string
		}{{"iif", s.match.iif}, {"oif", s.match.oif}} {
			for _, name := range d.names {
				if c.ifaces[name] == 0 {
					c.warnings = append(c.warnings, fmt.Sprintf("rule %q: match.%s: no interface %q: it matches no packet until a reload", s.rule.Name, d.field, name))
				}
			}
		}
	}
	for i := range specs {
		if w := ownerWarning(&specs[i]); w != "" {
			c.warnings = append(c.warnings, w)
		}
	}
	for i := range specs {
		if specs[i].rule.Match == "" && i+1 < len(specs) {
			for _, s := range specs[i+1:] {
				c.warnings = append(c.warnings, fmt.Sprintf("rule %q: never reached: rule %q before it has no match table and takes every packet", s.rule.Name, specs[i].rule.Name))
			}
			break
		}
	}
	if len(specs) > 1 || specs[0].rule.Match != "" {
		c.cls = build(specs, c.ifaces)
	}
	return c, nil
}

// ownerWarning says what a rule keyed or matched by the packets' owner
// (uid or gid) does with packets that have none, or "".
func ownerWarning(s *ruleSpec) string {
	const divert = "Divert rules for INPUT or FORWARD only (packetshaper-rules' default chain is INPUT) give it no packet with an owner: divert OUTPUT (packetshaper-rules add --chain OUTPUT; RULES_OPTS in /etc/default/packetshaper)"
	var fields []string
	if s.match.uid != nil {
		fields = append(fields, "match.uid")
	}
	if s.match.gid != nil {
		fields = append(fields, "match.gid")
	}
	keyed := false
	if s.rule.Action == shaper.ActionLimit {
		by := s.rule.Limit.Key.Mode.By()
		keyed = by == flows.ByUID || by == flows.ByGID
	}
	switch {
	case len(fields) > 0:
		return fmt.Sprintf("rule %q: %s: only packets a local socket sends (the OUTPUT chain) have an owner; forwarded and incoming packets, replies the kernel makes itself and replayed captures never match. %s", s.rule.Name, strings.Join(fields, " and "), divert)
	case keyed:
		return fmt.Sprintf("rule %q: key %s: only packets a local socket sends (the OUTPUT chain) have an owner; the others (forwarded, incoming, replies the kernel makes itself, replayed captures) share one flow, \"no owner\", limited as one user. %s", s.rule.Name, s.rule.Limit.Key.Mode, divert)
	}
	return ""
}

// Policy returns the engine's policy: the rules and their classifier (nil
// for a single rule that matches everything). The caller sets Malformed and
// OffloadAfter.
func (c *Compiled) Policy() shaper.Policy {
	p := shaper.Policy{Rules: slices.Clone(c.rules)}
	if c.cls != nil {
		p.Classifier = c.cls
	}
	return p
}

// Redis returns the [redis] table with its defaults filled in, nil if the
// file has none. The rules whose Limit.Global is set share it.
func (c *Compiled) Redis() *Redis { return c.redis }

// GlobalRules names the global rules (scope = "global").
func (c *Compiled) GlobalRules() []string {
	var names []string
	for _, r := range c.rules {
		if r.Limit.Global {
			names = append(names, r.Name)
		}
	}
	return names
}

// IfaceID returns the id that a packet's interface named name must carry in
// shaper.Meta to match the rules that name it: the index IfIndex gave, or
// in replay the id Compile gave. 0 if no rule names it (or, live, it does
// not exist).
func (c *Compiled) IfaceID(name string) uint32 { return c.ifaces[name] }

// InterfacesChanged reports whether an interface the rules name has
// another index now than at Compile (re-created, renamed, or come or gone):
// then Recompile gives a classifier that matches it again. Always false
// without Options.IfIndex (replay's ids do not change).
func (c *Compiled) InterfacesChanged() bool {
	if c.opts.IfIndex == nil {
		return false
	}
	for name, id := range c.ifaces {
		now, ok := c.opts.IfIndex(name)
		if !ok {
			now = 0
		}
		if now != id {
			return true
		}
	}
	return false
}

// Recompile compiles the same file again, resolving interface names anew.
// Rules keep their Match text (names, not indexes), so an engine reloaded
// with the result keeps every rule's state.
func (c *Compiled) Recompile() (*Compiled, error) { return c.file.Compile(c.opts) }

// MetaRules names the rules whose match looks beyond the packet's headers:
// at its mark, interfaces or queue. The packets of one 5-tuple can then
// meet different rules, which matters to what sees only the 5-tuple (the
// kernel offload of --offload).
func (c *Compiled) MetaRules() []string { return slices.Clone(c.metaRules) }

// Warnings lists what Compile let through but the user should know: each
// interface a rule names that does not exist, and the rules after one that
// matches every packet.
func (c *Compiled) Warnings() []string { return slices.Clone(c.warnings) }

// canonical writes the match table in one canonical form: fields in a
// fixed order, list items normalized, sorted and deduplicated, port ranges
// merged. Two match tables that match the same packets by the same lists
// have the same text (a reload keeps the rule's flows), whatever their
// spelling. "" for a rule that matches everything.
func (s *matchSpec) canonical() string {
	var m Match
	if s.family != 0 {
		m.Family = "ipv" + strconv.Itoa(int(s.family))
	}
	prefixes := func(ps []netip.Prefix) []string {
		if ps == nil {
			return nil
		}
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b netip.Prefix) int {
			return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
		})
		ps = slices.Compact(ps)
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.String()
		}
		return out
	}
	m.Src, m.Dst = prefixes(s.src), prefixes(s.dst)
	if s.proto != nil {
		ps := slices.Clone(s.proto)
		slices.Sort(ps)
		ps = slices.Compact(ps)
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = flows.ProtoName(p)
		}
		m.Proto = out
	}
	ports := func(rs []portRange) []string {
		if rs == nil {
			return nil
		}
		var out []string
		for _, r := range mergeRanges(rs) {
			if r.lo == r.hi {
				out = append(out, strconv.Itoa(int(r.lo)))
			} else {
				out = append(out, fmt.Sprintf("%d-%d", r.lo, r.hi))
			}
		}
		return out
	}
	m.Sport, m.Dport = ports(s.sport), ports(s.dport)
	names := func(ns []string) []string {
		if ns == nil {
			return nil
		}
		ns = slices.Clone(ns)
		slices.Sort(ns)
		return slices.Compact(ns)
	}
	m.Iif, m.Oif = names(s.iif), names(s.oif)
	if s.hasMark {
		m.Mark = formatMark(s.mark, s.markMask)
	}
	idList := func(rs []idRange) []string {
		if rs == nil {
			return nil
		}
		var out []string
		for _, r := range mergeIDs(rs) {
			if r.lo == r.hi {
				out = append(out, strconv.FormatUint(uint64(r.lo), 10))
			} else {
				out = append(out, fmt.Sprintf("%d-%d", r.lo, r.hi))
			}
		}
		return out
	}
	m.UID, m.GID = idList(s.uid), idList(s.gid)
	if s.queue != nil {
		qs := slices.Clone(s.queue)
		slices.Sort(qs)
		qs = slices.Compact(qs)
		m.Queue = make([]int, len(qs))
		for i, q := range qs {
			m.Queue[i] = int(q)
		}
	}
	// Fields in the schema's order, as name=item,item.
	var parts []string
	for i := range schema {
		fd := &schema[i]
		if fd.table != tMatch {
			continue
		}
		switch p := fd.inMatch(&m).(type) {
		case *string:
			if *p != "" {
				parts = append(parts, fd.name+"="+*p)
			}
		case *[]string:
			if *p != nil {
				parts = append(parts, fd.name+"="+strings.Join(*p, ","))
			}
		case *[]int:
			if *p != nil {
				items := make([]string, len(*p))
				for i, q := range *p {
					items[i] = strconv.Itoa(q)
				}
				parts = append(parts, fd.name+"="+strings.Join(items, ","))
			}
		}
	}
	return strings.Join(parts, " ")
}

func mergeRanges(rs []portRange) []portRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b portRange) int { return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi)) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if int(r.lo) <= int(last.hi)+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// mergeIDs sorts id ranges and merges those that touch or overlap.
func mergeIDs(rs []idRange) []idRange {
	if len(rs) == 0 {
		return nil
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b idRange) int { return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi)) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if uint64(r.lo) <= uint64(last.hi)+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

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
	starts := []int{0}
	for i := range b.specs {
		for _, r := range get(&b.specs[i].match) {
			starts = append(starts, int(r.lo))
			if r.hi < math.MaxUint16 {
				starts = append(starts, int(r.hi)+1)
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
		for _, r := range mergeRangesOrNil(get(&b.specs[i].match)) {
			a, _ := slices.BinarySearch(starts, int(r.lo))
			for k := a; k < len(starts) && starts[k] <= int(r.hi); k++ {
				setBit(cover[k], i)
			}
		}
	}
	d.bounds = make([]uint16, len(starts))
	d.offs = make([]int32, len(starts))
	for k, s := range starts {
		d.bounds[k] = uint16(s)
		d.offs[k] = b.intern(cover[k])
	}
	if len(starts) > linPorts {
		d.table = make([]uint16, 1<<16)
		for k, s := range starts {
			end := 1 << 16
			if k+1 < len(starts) {
				end = starts[k+1]
			}
			for port := s; port < end; port++ {
				d.table[port] = uint16(k)
			}
		}
	}
	return d
}

func mergeRangesOrNil(rs []portRange) []portRange {
	if len(rs) == 0 {
		return nil
	}
	return mergeRanges(rs)
}

// idDim is the uid or gid dimension, made as portDim's intervals; an
// ownerless packet's class is the rules without the constraint.
func (b *builder) idDim(get func(m *matchSpec) []idRange) idDim {
	free, _, used := b.dim(func(m *matchSpec) bool { return get(m) != nil })
	if !used {
		return idDim{}
	}
	d := idDim{on: true, none: b.intern(free)}
	starts := []uint32{0}
	for i := range b.specs {
		for _, r := range get(&b.specs[i].match) {
			starts = append(starts, r.lo)
			if r.hi < math.MaxUint32 {
				starts = append(starts, r.hi+1)
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
		for _, r := range mergeIDs(get(&b.specs[i].match)) {
			a, _ := slices.BinarySearch(starts, r.lo)
			for k := a; k < len(starts) && starts[k] <= r.hi; k++ {
				setBit(cover[k], i)
			}
		}
	}
	d.bounds = starts
	d.offs = make([]int32, len(starts))
	for k := range starts {
		d.offs[k] = b.intern(cover[k])
	}
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
