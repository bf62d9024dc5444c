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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// refuseEnv, set to a reason, makes the kernel "refuse" the fast path
// program (tests of the fallback).
const refuseEnv = "PACKETSHAPER_TEST_REFUSE_FASTPATH"

// fastPath is the running fast path: the program attached at tcx ingress
// of each interface by links this process owns (never pinned: a SIGKILL
// detaches them), or, when the kernel refused it, the punt-everything
// program (the whole policy in user space).
type fastPath struct {
	log   *slog.Logger
	links []link.Link
	ifidx []int // links[i]'s interface: the program for its link type (ProgFor)
	punt  uint32

	mu    sync.Mutex
	prog  *fastpath.Program // nil in the fallback
	all   *ebpf.Program     // the punt-everything program of the fallback
	index map[string]int    // kernel rule name → index in prog
	// carry: the counts of programs replaced by reloads, by rule name.
	carry map[string]fastpath.Counters
	// flows: the kernel limit rules' flows and evictions, by name, as
	// countFlows last counted them (every flowsEvery, never on the
	// queues' goroutines).
	flows map[string]ruleFlows
	// stop ends countLoop; it closes counted.
	stop, counted chan struct{}
}

// startFastpath loads and attaches the fast path for comp. A program the
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
			return nil, UsageError{fmt.Errorf("--fastpath: interface %q: %w", name, err)}
		}
		idx[i] = ifc.Index
	}
	f, o := comp.Source()
	spec, _, err := fastpath.Compile(f, o)
	if err != nil {
		return nil, err
	}
	fp := &fastPath{log: log, punt: spec.PuntMark, carry: map[string]fastpath.Counters{}}
	var prog *ebpf.Program
	if why := os.Getenv(refuseEnv); why != "" {
		err = errors.New("the kernel refused the fast path program: " + why + " (" + refuseEnv + ")")
	} else {
		fp.prog, err = fastpath.Load(spec)
	}
	if err != nil {
		if fc.Required {
			return nil, fmt.Errorf("--fastpath-required: %s", oneLine(err.Error()))
		}
		log.Warn("fast path off, the whole policy runs through NFQUEUE: " + oneLine(err.Error()))
		if fp.all, err = fastpath.LoadPuntAll(spec.PuntMark); err != nil {
			return nil, fmt.Errorf("--fastpath: %w", err)
		}
		prog = fp.all
	} else {
		prog = fp.prog.Prog()
		fp.index = kernelRules(spec)
	}
	for _, i := range idx {
		prog := prog
		if fp.prog != nil {
			if prog, err = fp.prog.ProgFor(i); err != nil {
				fp.close()
				return nil, fmt.Errorf("--fastpath: %s", oneLine(err.Error()))
			}
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: i, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			fp.close()
			return nil, fmt.Errorf("--fastpath: attaching at tcx ingress of %s: %s", fc.Ifaces[len(fp.links)], oneLine(err.Error()))
		}
		fp.links = append(fp.links, l)
		fp.ifidx = append(fp.ifidx, i)
	}
	if fp.prog != nil {
		fp.stop, fp.counted = make(chan struct{}), make(chan struct{})
		go fp.countLoop()
	}
	return fp, nil
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
	c, carried := fp.carry[name]
	i, ok := fp.index[name]
	if ok && fp.prog != nil {
		if k, err := fp.prog.RuleCounters(i); err == nil {
			c = add(c, k)
		}
	}
	if !ok && !carried {
		return fastRule{}, false
	}
	r := fastRule{RuleStats: shaper.RuleStats{Packets: c.Packets, Accepted: c.Accepted, Dropped: c.Dropped, ShadowDropped: c.Shadow, Marked: c.Marked}, kernel: ok && fp.prog != nil}
	if r.kernel {
		f := fp.flows[name]
		r.Flows, r.Evictions = f.flows, f.evictions
	}
	return r, true
}

func add(a, b fastpath.Counters) fastpath.Counters {
	a.Packets += b.Packets
	a.Accepted += b.Accepted
	a.Dropped += b.Dropped
	a.Shadow += b.Shadow
	a.Marked += b.Marked
	a.Punted += b.Punted
	a.Inserts += b.Inserts
	return a
}

// reload swaps in the program of comp on every link at once (link
// Update): limit rules unchanged keep their flows (fastpath.Reload), every
// rule's counters go on from the old program's. On an error the old
// program stays.
func (fp *fastPath) reload(comp *policy.Compiled) error {
	if fp == nil || fp.prog == nil {
		return nil // the fallback punts everything whatever the policy
	}
	f, o := comp.Source()
	spec, _, err := fastpath.Compile(f, o)
	if err != nil {
		return err
	}
	next, err := fastpath.Reload(spec, fp.prog)
	if err != nil {
		return err
	}
	for k, l := range fp.links {
		prog, err := next.ProgFor(fp.ifidx[k])
		if err == nil {
			err = l.Update(prog)
		}
		if err != nil {
			for j, l := range fp.links[:k] {
				if old, err := fp.prog.ProgFor(fp.ifidx[j]); err == nil {
					l.Update(old)
				}
			}
			next.Close()
			return fmt.Errorf("fast path: swapping the program: %w", err)
		}
	}
	fp.mu.Lock()
	for name, i := range fp.index {
		if c, err := fp.prog.RuleCounters(i); err == nil {
			t := add(fp.carry[name], c)
			if !slices.Contains(next.Kept, name) {
				// Its flows go with the old map: not evictions.
				t.Inserts -= min(t.Inserts, fp.flows[name].flows)
			}
			fp.carry[name] = t
		}
	}
	old := fp.prog
	fp.prog, fp.index = next, kernelRules(spec)
	fp.mu.Unlock()
	old.Close()
	fp.log.Info("fast path reloaded", "kept_flows", fmt.Sprint(next.Kept))
	return nil
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
	for _, l := range fp.links {
		l.Close()
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.prog != nil {
		fp.prog.Close()
		fp.prog = nil
	}
	if fp.all != nil {
		fp.all.Close()
	}
}
