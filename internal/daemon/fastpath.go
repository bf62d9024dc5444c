package daemon

import (
	"strings"
	"sync/atomic"

	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/shaper"
)

// FastpathConfig turns on the kernel fast path (package internal/fastpath):
// the rules the kernel can run are decided by an eBPF program at tcx (or
// tc) ingress of Ifaces; the others' packets reach the queue with the punt
// mark (the divert rule matches it: scripts/rules.sh add --fastpath).
type FastpathConfig struct {
	Ifaces []string
	// Required: a program the kernel refuses is an error, not a fallback
	// to the whole policy in user space.
	Required bool
	// Attach: how the program is attached (--fastpath-attach; "" is
	// fastpath.AttachAuto).
	Attach fastpath.AttachMode
}

// The paths a rule runs on: the label path of the rules' metrics, status's
// and the listing's path.
const (
	pathQueue  = "queue"  // NFQUEUE: the Go engine
	pathKernel = "kernel" // the eBPF fast path
)

// fastRule is the kernel's counts of a rule: those of its per-rule
// counters, and its flows present and evictions (the flow maps, counted
// apart from the queues' goroutines: fastPath.countFlows).
type fastRule struct {
	shaper.RuleStats
	// kernel: the rule runs in the kernel now (the counts may also be
	// those of programs replaced by reloads, in which it ran there).
	kernel bool
}

// fastCounts gives the kernel's counts of a rule, and of a total, by name,
// to add to the engine's in the snapshots (so status, metrics and the
// stats line count both paths).
type fastCounts struct {
	get   func(name string) (fastRule, bool)
	total func(name string) (shaper.TotalStats, bool)
}

// addFast adds the kernel's counts to the rules of a snapshot and to its
// flow totals, and labels the rules the kernel runs with pathKernel.
func addFast(fc *atomic.Pointer[fastCounts], s *snapshot) {
	f := fc.Load()
	if f == nil {
		return
	}
	for i := range s.rules {
		k, ok := f.get(s.rules[i].name)
		if !ok {
			continue
		}
		if k.kernel {
			s.rules[i].path = pathKernel
		}
		addRule(&s.rules[i].RuleStats, &k.RuleStats)
		s.Flows += k.Flows
		s.Evictions += k.Evictions
	}
	if f.total == nil {
		return
	}
	for i := range s.totals {
		if k, ok := f.total(s.totals[i].total.Name); ok {
			addTotal(&s.totals[i].TotalStats, k)
		}
	}
}

// addTotal adds the counts of k to t: a kernel total's to the engine's, or
// a program's to those of the programs it replaced.
func addTotal(t *shaper.TotalStats, k shaper.TotalStats) {
	t.Packets += k.Packets
	t.Accepted += k.Accepted
	t.Dropped += k.Dropped
}

// addRule adds the counts of k to r: the kernel's to the engine's, or a
// program's to those of the programs it replaced.
func addRule(r, k *shaper.RuleStats) {
	r.Packets += k.Packets
	r.Accepted += k.Accepted
	r.Dropped += k.Dropped
	r.ShadowDropped += k.ShadowDropped
	r.Marked += k.Marked
	r.Flows += k.Flows
	r.Evictions += k.Evictions
}

// fastpathRuleHints checks the queue rules (failopen.QueueRules) against
// the fast path's one divert rule, scripts/rules.sh add --fastpath's: a
// queue rule of ours in mangle PREROUTING (it matches the punt mark). None:
// the user-space rules' packets are never queued (they pass undecided).
// Another queue rule of ours: the packets the program decided are queued
// and decided again.
func fastpathRuleHints(rules []failopen.QueueRule, queues []uint16) []string {
	ours := func(r *failopen.QueueRule) bool {
		if r.Computed {
			return false
		}
		for _, q := range queues {
			if q >= r.Queue && int(q) < int(r.Queue)+int(r.Queues) {
				return true
			}
		}
		return false
	}
	var punt bool
	var other []string
	for i := range rules {
		r := &rules[i]
		if !ours(r) {
			continue
		}
		if r.Table == "mangle" && r.Chain == "PREROUTING" {
			punt = true
		} else {
			other = append(other, r.Family+" "+r.Table+" "+r.Chain)
		}
	}
	var out []string
	if !punt {
		out = append(out, "fast path: no queue rule in mangle PREROUTING for the punt mark: the user-space rules' packets will not reach the queue (scripts/rules.sh add --fastpath --queue N)")
	}
	if len(other) > 0 {
		out = append(out, "fast path: other queue rules send to this queue ("+strings.Join(other, ", ")+"): packets the kernel decided will be queued and decided again; with --fastpath, the punt-mark rule should be the only one")
	}
	return out
}
