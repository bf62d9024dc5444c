//go:build linux

package fastpath

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// Program is the fast path loaded into the kernel: the program and its
// maps, owned by this process (nothing is pinned: Close, or the process's
// end, frees them).
type Program struct {
	objs fastpathObjects
	cfg  fastpathCfg
	// inner is the template of the rules' flow maps; tables[i] is rule
	// i's (nil but for limit rules), news[i] its map of new flows.
	inner  *ebpf.MapSpec
	tables []*ebpf.Map
	news   []*ebpf.Map
	spec   Spec
	// Kept names the limit rules whose flow map Reload took over.
	Kept []string
}

// Load loads the program for s and fills its maps. Its error says in one
// line why the kernel refused it.
func Load(s Spec) (*Program, error) { return Reload(s, nil) }

// Reload is Load for a new policy while old runs: a limit rule of s whose
// name and Entry are those of one of old's keeps that rule's flow map (its
// flows and their state, shared until old is closed); other rules start
// empty. Kept names them. The counters start at zero. old may be nil.
func Reload(s Spec, old *Program) (*Program, error) {
	cs, err := loadFastpath()
	if err != nil {
		return nil, err
	}
	p := &Program{inner: cs.Maps[fastpathMapFlows].InnerMap}
	if err := cs.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, loadError(err)
	}
	if err := p.fill(s, old); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close frees the program and its maps (a link holding the program keeps
// it until the link is closed).
func (p *Program) Close() error {
	for _, m := range append(append([]*ebpf.Map{}, p.tables...), p.news...) {
		if m != nil {
			m.Close()
		}
	}
	return p.objs.Close()
}

// Prog is the tc program for Ethernet links, for tests (ProgFor gives an
// interface's; Attach attaches it).
func (p *Program) Prog() *ebpf.Program { return p.objs.Fastpath }

// SetNow makes the program read now (Unix nanoseconds) as the time instead
// of the clock; 0 goes back to the clock. For tests.
func (p *Program) SetNow(now int64) error {
	p.cfg.Now = uint64(now)
	return p.objs.Config.Put(uint32(0), &p.cfg)
}

// Counters are one rule's counts, summed over the CPUs.
type Counters struct {
	Packets, Accepted, Dropped, Shadow, Marked, Punted uint64
	// Inserts: flows the rule put in its flow map. The map (an LRU) does
	// not count what it evicts: Inserts less the flows present (FlowCount)
	// is an upper bound of the evictions.
	Inserts uint64
}

// RuleCounters returns rule i's counters; i = MaxRules gives the program's
// own (Packets, every IP packet; Punted, those it punted before matching;
// Accepted, the packets no rule matched).
func (p *Program) RuleCounters(i int) (Counters, error) {
	c, err := p.counters(i)
	if err != nil || i != MaxRules {
		return c, err
	}
	// The program counts a packet once, in the counters of the rule that
	// decided it, or in its own if none did: its own Packets are the
	// rules' and its own.
	for j := range p.spec.Entries {
		r, err := p.counters(j)
		if err != nil {
			return Counters{}, err
		}
		c.Packets += r.Packets
	}
	return c, nil
}

func (p *Program) counters(i int) (Counters, error) {
	var per []fastpathRuleCounters
	if err := p.objs.Counters.Lookup(uint32(i), &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, x := range per {
		c.Packets += x.C[fastpathCounterC_PACKETS]
		c.Accepted += x.C[fastpathCounterC_ACCEPTED]
		c.Dropped += x.C[fastpathCounterC_DROPPED]
		c.Shadow += x.C[fastpathCounterC_SHADOW]
		c.Marked += x.C[fastpathCounterC_MARKED]
		c.Punted += x.C[fastpathCounterC_PUNTED]
		c.Inserts += x.C[fastpathCounterC_INSERTS]
	}
	return c, nil
}

// bootOffset is the Unix time at boot, CLOCK_REALTIME − CLOCK_BOOTTIME,
// read once per process: the kernel's time base (boot time plus this) never
// moves with the wall clock, so that a clock step between two reloads
// neither refills nor starves the flows a reload keeps.
var bootOffset = sync.OnceValue(func() int64 { return readBootOffset() })

// readBootOffset reads the clocks (a variable for a test that steps them).
var readBootOffset = func() int64 {
	var rt, bt unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &bt)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	return time.Duration(rt.Nano() - bt.Nano()).Nanoseconds()
}

func (p *Program) fill(s Spec, old *Program) error {
	p.spec = s
	n := len(s.Entries)
	if n > MaxRules {
		return fmt.Errorf("%d rules, more than the kernel table's %d", n, MaxRules)
	}
	var srcFree, dstFree uint64
	for i, e := range s.Entries {
		if e.Never {
			continue // in no address class: it matches nothing
		}
		if e.Src == nil {
			srcFree |= 1 << i
		}
		if e.Dst == nil {
			dstFree |= 1 << i
		}
	}
	var lpm uint32 // the tries holding prefixes of a family (cfg.lpm)
	for _, d := range []struct {
		m          *ebpf.Map
		free       uint64
		get        func(*Entry) []netip.Prefix
		has4, has6 uint32
	}{
		{p.objs.SrcCidrs, srcFree, func(e *Entry) []netip.Prefix { return e.Src }, uint32(fastpathLpmFlagLPM_SRC4), uint32(fastpathLpmFlagLPM_SRC6)},
		{p.objs.DstCidrs, dstFree, func(e *Entry) []netip.Prefix { return e.Dst }, uint32(fastpathLpmFlagLPM_DST4), uint32(fastpathLpmFlagLPM_DST6)},
	} {
		for pfx, bits := range addrClasses(s.Entries, d.get) {
			if pfx.Addr().Is4() {
				lpm |= d.has4
			} else {
				lpm |= d.has6
			}
			k := lpmKey(pfx)
			v := bits | d.free
			if err := d.m.Put(&k, &v); err != nil {
				return fmt.Errorf("filling the address map: %w", err)
			}
		}
	}
	p.tables = make([]*ebpf.Map, n)
	p.news = make([]*ebpf.Map, n)
	for i, e := range s.Entries {
		if e.Action != Limit {
			continue
		}
		if err := p.flowMaps(i, &e, old); err != nil {
			return err
		}
	}
	if err := p.fillTotals(s, old); err != nil {
		return err
	}
	for i, e := range s.Entries {
		r := ruleEntry(&e)
		r.Total = totalNone
		for ti, t := range s.Totals {
			if t.Name == e.Total && e.Total != "" {
				r.Total = uint32(ti)
				if t.Bytes {
					r.Tbytes = 1
				}
			}
		}
		if err := p.objs.Rules.Put(uint32(i), &r); err != nil {
			return fmt.Errorf("filling the rule table: %w", err)
		}
	}
	p.cfg = fastpathCfg{SrcFree: srcFree, DstFree: dstFree, Offset: bootOffset(), Nrules: uint32(n), PuntMark: s.PuntMark, Lpm: lpm}
	return p.objs.Config.Put(uint32(0), &p.cfg)
}

// minNewFlows is the least a limit rule's map of new flows holds.
const minNewFlows = 128

// newFlows is the size of the map of new flows (flows_new) of a rule of
// max-flows n: n, as the map of flows. A flow moves to the map of flows at
// its second packet only if that map of new flows still holds it then, so
// that it must hold as many flows as may start between a flow's first two
// packets: a tenth of max-flows never let 1 000 flows sent round robin
// through a 3 024-flow rule move (each of their packets found a fresh
// bucket; TestNewFlowsRoundRobin). At n, without a flood a flow keeps its
// state as long as in one LRU map of n; under a flood of one-packet flows
// the map of flows keeps its own.
func newFlows(n int) int { return max(n, minNewFlows) }

// flowMapSize is the size of a limit rule's flow map held by the outer map
// named outer (flows: max-flows n; flows_new: newFlows(n)), for the loader
// and for MapMemory alike.
func flowMapSize(outer string, n int) int {
	if outer == fastpathMapFlowsNew {
		return newFlows(n)
	}
	return n
}

// flowMaps gives limit rule i (Entry e) its two flow maps: old's, if old
// has the rule unchanged (its flows keep their state, wherever the rule
// moves in the list: the maps are the rule's own, their keys hold no rule),
// else new, empty ones.
func (p *Program) flowMaps(i int, e *Entry, old *Program) error {
	if m, small := old.table(e); m != nil {
		c, err := m.Clone()
		if err == nil {
			cs, err := small.Clone()
			if err == nil {
				p.tables[i], p.news[i] = c, cs
				p.Kept = append(p.Kept, e.Name)
				return p.putFlowMaps(i)
			}
			c.Close()
		}
	}
	for _, d := range []struct {
		m    **ebpf.Map
		name string
		size int
	}{
		{&p.tables[i], "flows_%d", flowMapSize(fastpathMapFlows, e.MaxFlows)},
		{&p.news[i], "flows_new_%d", flowMapSize(fastpathMapFlowsNew, e.MaxFlows)},
	} {
		ms := p.inner.Copy()
		ms.Name = fmt.Sprintf(d.name, i)
		ms.MaxEntries = uint32(d.size)
		m, err := ebpf.NewMap(ms)
		if err != nil {
			return fmt.Errorf("making rule %s's flow map (%d flows): %s", e.Name, d.size, oneLine(err.Error()))
		}
		*d.m = m
	}
	return p.putFlowMaps(i)
}

func (p *Program) putFlowMaps(i int) error {
	if err := p.objs.Flows.Put(uint32(i), p.tables[i]); err != nil {
		return fmt.Errorf("filling the flow maps: %w", err)
	}
	if err := p.objs.FlowsNew.Put(uint32(i), p.news[i]); err != nil {
		return fmt.Errorf("filling the flow maps: %w", err)
	}
	return nil
}

// table is the flow maps (flows, flows_new) of p's limit rule named e.Name
// if its Entry is e.
func (p *Program) table(e *Entry) (*ebpf.Map, *ebpf.Map) {
	if p == nil {
		return nil, nil
	}
	for i := range p.spec.Entries {
		if o := &p.spec.Entries[i]; o.Name == e.Name && o.Action == Limit && p.tables[i] != nil && p.news[i] != nil && reflect.DeepEqual(*o, *e) {
			return p.tables[i], p.news[i]
		}
	}
	return nil, nil
}

// Spec is the policy p runs.
func (p *Program) Spec() Spec { return p.spec }

// addrClasses gives, for each prefix of the rules' lists, the rules with a
// prefix containing it: what a longest-prefix match on it stands for.
func addrClasses(es []Entry, get func(*Entry) []netip.Prefix) map[netip.Prefix]uint64 {
	out := map[netip.Prefix]uint64{}
	for i := range es {
		for _, p := range get(&es[i]) {
			out[p] = 0
		}
	}
	for p := range out {
		var bits uint64
		for i := range es {
			if es[i].Never {
				continue
			}
			for _, q := range get(&es[i]) {
				if q.Addr().Is4() == p.Addr().Is4() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
					bits |= 1 << i
				}
			}
		}
		out[p] = bits
	}
	return out
}

func lpmKey(p netip.Prefix) fastpathLpmKey {
	var k fastpathLpmKey
	k.Prefixlen = 8 + uint32(p.Bits())
	if p.Addr().Is4() {
		k.Data[0] = 4
		a := p.Addr().As4()
		copy(k.Data[1:], a[:])
	} else {
		k.Data[0] = 6
		a := p.Addr().As16()
		copy(k.Data[1:], a[:])
	}
	return k
}

// The program's numbers (bpf/common.h's enums, from the object's BTF) of
// the Go side's actions, algorithms, key modes and over-limit actions.
var (
	actions = map[Action]fastpathAction{Accept: fastpathActionACT_ACCEPT, Drop: fastpathActionACT_DROP, Limit: fastpathActionACT_LIMIT, Punt: fastpathActionACT_PUNT}
	algos   = map[shaper.Algorithm]fastpathAlgo{shaper.TokenBucket: fastpathAlgoALGO_TB, shaper.FixedWindow: fastpathAlgoALGO_FW, shaper.SlidingWindowCounter: fastpathAlgoALGO_SWC}
	modes   = map[flows.Mode]fastpathKeyMode{flows.FiveTuple: fastpathKeyModeMODE_5TUPLE, flows.Src: fastpathKeyModeMODE_SRC, flows.Dst: fastpathKeyModeMODE_DST, flows.SrcDst: fastpathKeyModeMODE_SRCDST}
	overs   = map[Over]fastpathOver{OverDrop: fastpathOverOVER_DROP, OverShadow: fastpathOverOVER_SHADOW, OverMark: fastpathOverOVER_MARK}
)

// num is the program's number of k (0xff, which the program takes for no
// value of it, if it has none: Compile sends it none such).
func num[K comparable, V ~uint32](m map[K]V, k K) uint8 {
	if v, ok := m[k]; ok {
		return uint8(v)
	}
	return 0xff
}

func ruleEntry(e *Entry) fastpathRuleEntry {
	r := fastpathRuleEntry{
		Burst: uint64(e.BurstN), RateInt: e.RateInt, RateHi: e.RateHi, RateLo: e.RateLo,
		Window: e.Window, Limit: e.Limit, Timeout: e.Timeout,
		Mark: e.Mark, MarkMask: e.Mask, SetMark: e.SetMark, SetMask: e.SetMask,
		Family: e.Family, Action: num(actions, e.Action), Algo: num(algos, e.Algo), Mode: num(modes, e.Key.Mode),
		Over: num(overs, e.Over),
	}
	switch e.Orig {
	case shaper.ActionAccept:
		r.Orig = uint8(fastpathActionACT_ACCEPT)
	case shaper.ActionDrop:
		r.Orig = uint8(fastpathActionACT_DROP)
	default:
		r.Orig = uint8(fastpathActionACT_LIMIT)
	}
	if e.Never {
		r.Family = 0xff
	}
	if e.Proto != nil {
		r.HasProto = 1
	}
	if e.Proto == nil {
		r.Proto = [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	} else {
		r.Proto = *e.Proto
	}
	for k, pr := range e.Sport {
		r.SportLo[k], r.SportHi[k] = pr.Lo, pr.Hi
	}
	for k, pr := range e.Dport {
		r.DportLo[k], r.DportHi[k] = pr.Lo, pr.Hi
	}
	r.N_sport, r.N_dport = uint8(len(e.Sport)), uint8(len(e.Dport))
	copy(r.Iif[:], e.Iif)
	r.N_iif = uint8(len(e.Iif))
	if e.HasMark {
		r.HasMark = 1
	}
	if e.Bytes {
		r.Bytes = 1
	}
	if e.Key.Symmetric {
		r.Symmetric = 1
	}
	full := func(v, n int) uint8 {
		if v <= 0 || v >= n {
			return uint8(n)
		}
		return uint8(v)
	}
	r.Src4, r.Dst4 = full(e.Key.SrcPrefix4, 32), full(e.Key.DstPrefix4, 32)
	r.Src6, r.Dst6 = full(e.Key.SrcPrefix6, 128), full(e.Key.DstPrefix6, 128)
	return r
}

// loadError says in one line why the kernel refused the program: the
// verifier's reason (the last line of its log that is not its statistics)
// when there is one.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return fmt.Errorf("loading the fast path: %s", oneLine(err.Error()))
	}
	why := ""
	for i := len(ve.Log) - 1; i >= 0 && why == ""; i-- {
		l := strings.TrimSpace(ve.Log[i])
		if l != "" && !strings.HasPrefix(l, "processed ") && !strings.HasPrefix(l, "verification time") && !strings.HasPrefix(l, "stack depth") {
			why = l
		}
	}
	if why == "" {
		return fmt.Errorf("the kernel refused the fast path program: %w", ve.Cause)
	}
	return fmt.Errorf("the kernel refused the fast path program: %w (verifier: %s)", ve.Cause, oneLine(why))
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
