package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

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
	totals    []shaper.Total
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
	specs, totals, err := f.check()
	if err != nil {
		return nil, err
	}
	c := &Compiled{file: f, opts: o, ifaces: map[string]uint32{}, redis: f.Redis.WithDefaults(), totals: totals}
	global := false
	for i := range specs {
		global = global || specs[i].rule.Limit.Global
	}
	for _, t := range totals {
		global = global || t.Limit.Global
	}
	if c.redis != nil && !global {
		c.warnings = append(c.warnings, "[redis]: no rule is global (scope = \"global\"): the store is not used")
	}
	if w := c.redis.plainWarning(); w != "" && global {
		c.warnings = append(c.warnings, w)
	}
	for i := range specs {
		if w := specs[i].unitWarn; w != "" {
			c.warnings = append(c.warnings, w)
		}
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
		if w := policeTCPWarning(&specs[i]); w != "" {
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

// noOwnerBut qualifies ownerWarning's "one flow" for each no-owner.
var noOwnerBut = map[flows.NoOwner]string{
	flows.NoOwnerAcceptReplies: ", but for the replies the kernel makes itself, which pass (no-owner = \"accept-replies\")",
	flows.NoOwnerAccept:        ", except that no-owner = \"accept\" lets them all through",
	flows.NoOwnerKeyByDst:      ", one flow per destination address with no-owner = \"key-by-dst\"",
}

// ownerWarning says what a rule keyed or matched by the packets' owner
// (uid or gid) does with packets that have none, or "".
func ownerWarning(s *ruleSpec) string {
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
		return fmt.Sprintf("rule %q: %s: only packets a local socket sends (the OUTPUT chain) have an owner; forwarded and incoming packets, replies the kernel makes itself and replayed captures never match (packetshaper check warns when the divert rules feed it from INPUT or FORWARD only)", s.rule.Name, strings.Join(fields, " and "))
	case keyed:
		return fmt.Sprintf("rule %q: key %s: only packets a local socket sends (the OUTPUT chain) have an owner; the others (forwarded, incoming, replies the kernel makes itself, replayed captures) share one flow, \"no owner\", limited as one user%s (packetshaper check warns when the divert rules feed it from INPUT or FORWARD only)", s.rule.Name, s.rule.Limit.Key.Mode, noOwnerBut[s.rule.Limit.Key.NoOwner])
	}
	return ""
}

// Policy returns the engine's policy: the rules and their classifier (nil
// for a single rule that matches everything). The caller sets Malformed and
// OffloadAfter.
func (c *Compiled) Policy() shaper.Policy {
	p := shaper.Policy{Rules: slices.Clone(c.rules), Totals: slices.Clone(c.totals)}
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
	return globalNames(c.rules, func(r shaper.Rule) (string, bool) { return r.Name, r.Limit.Global })
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
	m.Sport, m.Dport = rangeList(s.sport, portBounds), rangeList(s.dport, portBounds)
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
	m.UID, m.GID = rangeList(s.uid, idBounds), rangeList(s.gid, idBounds)
	canonicalL4(s, &m)
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
		if p, c := fd.inMatch(&m), fd.kind.codec(); c.given(p) {
			parts = append(parts, fd.name+"="+c.text(p))
		}
	}
	return strings.Join(parts, " ")
}

// rangeList writes ranges merged by mergeRanges as a policy does: "N" for
// one number, "LO-HI" for more. Nil for none.
func rangeList[R any, T uint16 | uint32](rs []R, bounds func(*R) (lo, hi *T)) []string {
	var out []string
	for _, r := range mergeRanges(rs, bounds) {
		lo, hi := bounds(&r)
		if *lo == *hi {
			out = append(out, strconv.FormatUint(uint64(*lo), 10))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", *lo, *hi))
		}
	}
	return out
}

// mergeRanges sorts ranges and merges those that touch or overlap; bounds
// gives a range's two ends (inclusive). Nil for none.
func mergeRanges[R any, T uint16 | uint32](rs []R, bounds func(*R) (lo, hi *T)) []R {
	if len(rs) == 0 {
		return nil
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b R) int {
		alo, ahi := bounds(&a)
		blo, bhi := bounds(&b)
		return cmp.Or(cmp.Compare(*alo, *blo), cmp.Compare(*ahi, *bhi))
	})
	out := rs[:1]
	for i := 1; i < len(rs); i++ {
		_, lastHi := bounds(&out[len(out)-1])
		lo, hi := bounds(&rs[i])
		if uint64(*lo) <= uint64(*lastHi)+1 {
			*lastHi = max(*lastHi, *hi)
			continue
		}
		out = append(out, rs[i])
	}
	return out
}

func portBounds(r *portRange) (lo, hi *uint16) { return &r.lo, &r.hi }
func idBounds(r *idRange) (lo, hi *uint32)     { return &r.lo, &r.hi }

// MergePortRanges sorts port ranges and merges those that touch or overlap
// (nil for none), as the classifier does.
func MergePortRanges(rs []PortRange) []PortRange {
	return mergeRanges(rs, func(r *PortRange) (lo, hi *uint16) { return &r.Lo, &r.Hi })
}

// Source returns the file and options c was compiled from (the kernel fast
// path compiles its split of the same policy).
func (c *Compiled) Source() (*File, Options) { return c.file, c.opts }
