//go:build linux

package daemon

import (
	"context"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/fastpath"
)

// The kernel's flows: the fast path's limit rules keep their flows in LRU
// maps (one per rule, of its max-flows entries), which the daemon reads
// with batch lookups of a bounded size (fastpath.FlowTable), never on the
// queues' goroutines: countLoop counts them every flowsEvery for the
// snapshots (status, metrics, the stats line), and a listing (packetshaper
// flows) streams them after the engine's flows, labelled path kernel.

// flowsEvery is how often countLoop counts the kernel's flows: status and
// the metrics show the count of at most this long ago; but a count waits
// at least flowsRest times as long as the last took, so that counting
// takes at most a tenth of a core. Counting reads each map whole: about
// 0.45 s for a million flows (BenchmarkFlowCount), so a map of a million
// is counted every 4.5 s or so.
const (
	flowsEvery = time.Second
	flowsRest  = 10
)

// ruleFlows is a kernel limit rule's flows present and evictions. An LRU
// map reports no evictions: they are the flows the rule inserted less those
// present, an upper bound (the flows a reload dropped with a changed rule's
// map are not counted).
type ruleFlows struct {
	flows, evictions uint64
}

// countLoop counts the kernel's flows now and every flowsEvery (or
// flowsRest times the last count's time) until stop.
func (fp *fastPath) countLoop() {
	defer close(fp.counted)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-fp.stop:
			return
		}
		t0 := time.Now()
		fp.countFlows()
		t.Reset(max(flowsEvery, flowsRest*time.Since(t0)))
	}
}

// countFlows counts the flows of each kernel limit rule.
func (fp *fastPath) countFlows() {
	type job struct {
		name    string
		t       *fastpath.FlowTable
		inserts uint64
	}
	var jobs []job
	fp.mu.Lock()
	prog := fp.prog
	if prog != nil {
		for name, i := range fp.index {
			t, err := prog.FlowTable(i)
			if err != nil {
				continue // not a limit rule
			}
			c, _ := prog.RuleCounters(i)
			jobs = append(jobs, job{name, t, fp.carry[name].inserts + c.Inserts})
		}
	}
	fp.mu.Unlock()
	out := make(map[string]ruleFlows, len(jobs))
	for _, j := range jobs {
		n, err := j.t.Count()
		j.t.Close()
		if err != nil {
			continue
		}
		out[j.name] = ruleFlows{flows: uint64(n), evictions: j.inserts - min(j.inserts, uint64(n))}
	}
	fp.mu.Lock()
	if fp.prog == prog {
		fp.flows = out
	}
	fp.mu.Unlock()
}

// listFlows calls emit with each flow of the kernel's limit rules (only
// rule's, if not empty), path kernel, in rule order. The maps are read
// through handles of their own: a reload meanwhile does not end it (the
// listing is of the maps as they were when it began). A kernel flow has
// no queue (Queue 0) and no per-flow counts (the maps hold only the
// limiter's state): Packets, Accepted and Dropped are 0.
func (fp *fastPath) listFlows(ctx context.Context, rule string, emit func(*control.Flow) error) error {
	if fp == nil {
		return nil
	}
	var ts []*fastpath.FlowTable
	fp.mu.Lock()
	if fp.prog != nil {
		for i, e := range fp.prog.Spec().Entries {
			if e.Action != fastpath.Limit || rule != "" && e.Name != rule {
				continue
			}
			if t, err := fp.prog.FlowTable(i); err == nil {
				ts = append(ts, t)
			}
		}
	}
	fp.mu.Unlock()
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	now := time.Now().UnixNano()
	var f control.Flow
	for _, t := range ts {
		e := t.Entry()
		u := unit(e.Bytes)
		if _, err := t.Flows(now, 0, func(k *fastpath.Flow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			f = control.Flow{Rule: e.Name, Path: pathKernel, Key: e.Key.Format(k.Key), Left: k.Left, Unit: u,
				IdleSecs: float64(max(now-k.Last, 0)) / 1e9, Expired: k.Expired}
			return emit(&f)
		}); err != nil {
			return err
		}
	}
	return nil
}
