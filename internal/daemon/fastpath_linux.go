//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"

	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// refuseEnv, set to a reason, makes the kernel "refuse" the fast path
// program (tests of the fallback); refuseRuleEnv, set to a rule name, makes
// it refuse every program in which that rule runs in the kernel (tests of a
// reload the kernel refuses).
const (
	refuseEnv     = "PACKETSHAPER_TEST_REFUSE_FASTPATH"
	refuseRuleEnv = "PACKETSHAPER_TEST_REFUSE_FASTPATH_RULE"
)

// fastPath is the running fast path: the program attached at ingress of
// each interface (fastpath.Attach: a tcx link this process owns, never
// pinned, so that a SIGKILL detaches it; or a tc filter, removed on a
// clean stop and at the next start), or, when the kernel refused it, the
// punt-everything program (the whole policy in user space).
type fastPath struct {
	log  *slog.Logger
	punt uint32
	mode fastpath.AttachMode
	// mapBytes: the kernel memory of the program's maps (MapMemory).
	mapBytes uint64

	mu sync.Mutex
	// links: one per --fastpath interface, in order; watchLoop attaches
	// again one whose interface came back.
	links []*fpLink
	prog  *fastpath.Program // nil in the fallback
	all   *fastpath.PuntAll // the punt-everything program of the fallback
	index map[string]int    // kernel rule name → index in prog
	// carry: the counts of programs replaced by reloads, by rule name;
	// carryTotals the same of the kernel's totals, by total name.
	carry       map[string]carried
	carryTotals map[string]shaper.TotalStats
	// flows: the kernel limit rules' flows and evictions, by name, as
	// countFlows last counted them (every flowsEvery, never on the
	// queues' goroutines).
	flows map[string]ruleFlows
	// stop ends countLoop; it closes counted. unwatch ends watchLoop; it
	// closes watched.
	stop, counted    chan struct{}
	unwatch, watched chan struct{}
}

// startFastpath removes the tc filters a killed packetshaper left at the
// interfaces, loads the fast path for comp and attaches it. A program the
// kernel refuses is one log line and the fallback (or, Required, the
// error).
func startFastpath(log *slog.Logger, fc FastpathConfig, comp *policy.Compiled) (*fastPath, error) {
	if len(fc.Ifaces) == 0 {
		return nil, nil
	}
	idx := make([]int, len(fc.Ifaces))
	for i, name := range fc.Ifaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, UsageError{&PartError{PartFastpath, fmt.Errorf("interface %q: %w", name, err)}}
		}
		idx[i] = ifc.Index
	}
	for i, name := range fc.Ifaces {
		n, err := fastpath.RemoveLeftover(idx[i])
		if err != nil {
			log.Warn("fast path: "+oneLine(err.Error()), "iface", name)
		}
		if n > 0 {
			log.Warn("fast path: removed the tc filter a previous packetshaper left at ingress (it was killed: a clean stop removes its own)", "iface", name, "filters", n)
		}
	}
	f, o := comp.Source()
	spec, _, err := fastpath.Compile(f, o)
	if err != nil {
		return nil, err
	}
	mode := fc.Attach
	if mode == "" {
		mode = fastpath.AttachAuto
	}
	fp := &fastPath{log: log, punt: spec.PuntMark, mode: mode, carry: map[string]carried{}}
	fp.prog, fp.mapBytes, err = load(spec, nil)
	if err != nil {
		if fc.Required {
			return nil, &PartError{PartFastpathRequired, errors.New(oneLine(err.Error()))}
		}
		log.Warn("fast path off, the whole policy runs through NFQUEUE: " + oneLine(err.Error()))
		if fp.all, err = fastpath.NewPuntAll(spec.PuntMark); err != nil {
			return nil, &PartError{PartFastpath, err}
		}
	} else {
		fp.index = kernelRules(spec)
	}
	for i, name := range fc.Ifaces {
		l, err := fastpath.AttachTo(fp.attachable(fp.prog), idx[i], mode)
		if err != nil {
			fp.close()
			return nil, &PartError{PartFastpath, fmt.Errorf("%s: %s", name, oneLine(err.Error()))}
		}
		if l.Fallback != "" {
			log.Warn("fast path: the kernel has no tcx, attached by tc (clsact + cls_bpf: a SIGKILL leaves the filter until the next start)", "iface", name, "tcx", l.Fallback)
		}
		fp.links = append(fp.links, &fpLink{name: name, ifindex: idx[i], l: l, state: linkAttached})
	}
	if fp.prog != nil {
		fp.stop, fp.counted = make(chan struct{}), make(chan struct{})
		go fp.countLoop()
	}
	fp.unwatch, fp.watched = make(chan struct{}), make(chan struct{})
	go fp.watchLoop(watchEvery)
	return fp, nil
}

// attachable is what to attach: p, or the punt-everything program when p
// is nil (the fallback). The one place that picks it (fastpath.AttachTo
// picks p's entry point for the interface's link type).
func (fp *fastPath) attachable(p *fastpath.Program) fastpath.Attachable {
	if p == nil {
		return fp.all
	}
	return p
}

// load loads the program of spec (fastpath.Reload) if its maps fit in
// fastpath.MaxMapBytes (and the test variables do not make the kernel
// refuse it), and returns it with its maps' kernel memory.
func load(spec fastpath.Spec, old *fastpath.Program) (*fastpath.Program, uint64, error) {
	if why := os.Getenv(refuseEnv); why != "" {
		return nil, 0, errors.New("the kernel refused the fast path program: " + why + " (" + refuseEnv + ")")
	}
	if name := os.Getenv(refuseRuleEnv); name != "" {
		if _, ok := kernelRules(spec)[name]; ok {
			return nil, 0, fmt.Errorf("the kernel refused the fast path program: rule %q runs in it (%s)", name, refuseRuleEnv)
		}
	}
	b, err := fastpath.CheckMapMemory(spec)
	if err != nil {
		return nil, 0, err
	}
	p, err := fastpath.Reload(spec, old)
	return p, b, err
}

// kernelRules maps the names of the rules the kernel decides to their
// index.
func kernelRules(s fastpath.Spec) map[string]int {
	m := map[string]int{}
	for i, e := range s.Entries {
		if e.Action != fastpath.Punt {
			m[e.Name] = i
		}
	}
	return m
}

// puntMark is the bit the Go classifier must not see (0 without a fast
// path).
func (fp *fastPath) puntMark() uint32 {
	if fp == nil {
		return 0
	}
	return fp.punt
}

// counts is fastCounts.get: a kernel rule's counts, those of replaced
// programs included, and its flows as last counted.
func (fp *fastPath) counts(name string) (fastRule, bool) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	c, wasCarried := fp.carry[name]
	i, ok := fp.index[name]
	if !ok && !wasCarried {
		return fastRule{}, false
	}
	r := fastRule{RuleStats: c.RuleStats, kernel: ok && fp.prog != nil}
	if r.kernel {
		if k, err := fp.prog.RuleCounters(i); err == nil {
			ks := ruleStats(k)
			addRule(&r.RuleStats, &ks)
		}
		f := fp.flows[name]
		r.Flows, r.Evictions = f.flows, f.evictions
	}
	return r, true
}

// totalCounts is fastCounts.total: a kernel total's counts, those of
// replaced programs included.
func (fp *fastPath) totalCounts(name string) (shaper.TotalStats, bool) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	t, wasCarried := fp.carryTotals[name]
	if fp.prog == nil {
		return t, wasCarried
	}
	k, ok, err := fp.prog.TotalCounters(name)
	if err != nil || !ok {
		return t, wasCarried
	}
	addTotal(&t, shaper.TotalStats{Packets: k.Packets, Accepted: k.Accepted, Dropped: k.Dropped})
	return t, true
}

// carryOldTotals keeps what the program a reload replaces counted of its
// totals (the new one's counters start at zero); under mu.
func (fp *fastPath) carryOldTotals() {
	if fp.prog == nil {
		return
	}
	for _, name := range fp.prog.TotalNames() {
		if k, ok, err := fp.prog.TotalCounters(name); err == nil && ok {
			if fp.carryTotals == nil {
				fp.carryTotals = map[string]shaper.TotalStats{}
			}
			t := fp.carryTotals[name]
			addTotal(&t, shaper.TotalStats{Packets: k.Packets, Accepted: k.Accepted, Dropped: k.Dropped})
			fp.carryTotals[name] = t
		}
	}
}

// carried is what the programs reloads replaced counted of a rule: its
// counters, and the flows they inserted (less those of the maps a reload
// dropped with a changed rule).
type carried struct {
	shaper.RuleStats
	inserts uint64
}

// ruleStats is a kernel rule's counters as the engine's.
func ruleStats(c fastpath.Counters) shaper.RuleStats {
	return shaper.RuleStats{Packets: c.Packets, Accepted: c.Accepted, Dropped: c.Dropped, ShadowDropped: c.Shadow, Marked: c.Marked}
}

// fpNext is a reload's program, loaded and filled (prepare), not yet
// attached (commit).
type fpNext struct {
	prog     *fastpath.Program
	spec     fastpath.Spec
	mapBytes uint64
}

// prepare loads the program of comp for a reload: limit rules unchanged
// keep their flows (fastpath.Reload). Its error (a program the kernel
// refuses) must fail the whole reload, so that both paths keep the old
// policy. nil (and no error) without a fast path or in the fallback, which
// punts everything whatever the policy.
func (fp *fastPath) prepare(comp *policy.Compiled) (*fpNext, error) {
	if fp == nil || fp.prog == nil {
		return nil, nil
	}
	f, o := comp.Source()
	spec, _, err := fastpath.Compile(f, o)
	if err != nil {
		return nil, fmt.Errorf("fast path: %w", err)
	}
	next, b, err := load(spec, fp.prog)
	if err != nil {
		return nil, fmt.Errorf("fast path: %s", oneLine(err.Error()))
	}
	return &fpNext{prog: next, spec: spec, mapBytes: b}, nil
}

// abort frees a prepared program that will not run.
func (fp *fastPath) abort(n *fpNext) {
	if n != nil {
		n.prog.Close()
	}
}

// commit swaps n's program in on every link at once (link update, tc
// filter replace); every rule's counters go on from the old program's. A
// link whose interface is gone is skipped (watchLoop attaches the new
// program when it comes back). On another error the old program stays on
// every link.
func (fp *fastPath) commit(n *fpNext) error {
	if n == nil {
		return nil
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for k, fl := range fp.links {
		if fl.l == nil {
			continue
		}
		if err := fl.l.UpdateTo(n.prog); err != nil {
			if fastpath.Gone(err) {
				continue
			}
			for _, fl := range fp.links[:k] {
				if fl.l != nil {
					fl.l.UpdateTo(fp.prog)
				}
			}
			n.prog.Close()
			return fmt.Errorf("fast path: swapping the program at %s: %s", fl.name, oneLine(err.Error()))
		}
	}
	for name, i := range fp.index {
		if c, err := fp.prog.RuleCounters(i); err == nil {
			t := fp.carry[name]
			ks := ruleStats(c)
			addRule(&t.RuleStats, &ks)
			t.inserts += c.Inserts
			if !slices.Contains(n.prog.Kept, name) {
				// Its flows go with the old map: not evictions.
				t.inserts -= min(t.inserts, fp.flows[name].flows)
			}
			fp.carry[name] = t
		}
	}
	fp.carryOldTotals()
	old := fp.prog
	fp.prog, fp.index, fp.mapBytes = n.prog, kernelRules(n.spec), n.mapBytes
	old.Close()
	fp.log.Info("fast path reloaded", "kept_flows", fmt.Sprint(n.prog.Kept), "kernel_maps_mib", mib(fp.mapBytes))
	return nil
}

// reload is prepare and commit.
func (fp *fastPath) reload(comp *policy.Compiled) error {
	n, err := fp.prepare(comp)
	if err != nil {
		return err
	}
	return fp.commit(n)
}

// close detaches the program from every interface and frees it.
func (fp *fastPath) close() {
	if fp == nil {
		return
	}
	if fp.stop != nil {
		close(fp.stop)
		<-fp.counted
	}
	if fp.unwatch != nil {
		close(fp.unwatch)
		<-fp.watched
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, fl := range fp.links {
		if fl.l != nil {
			if err := fl.l.Close(); err != nil {
				fp.log.Warn("fast path: "+oneLine(err.Error()), "iface", fl.name)
			}
			fl.l = nil
		}
	}
	if fp.prog != nil {
		fp.prog.Close()
		fp.prog = nil
	}
	if fp.all != nil {
		fp.all.Close()
	}
}

// mib formats a size in MiB for the log.
func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
