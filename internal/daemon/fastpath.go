package daemon

import (
	"sync/atomic"

	"github.com/packetshaper/packetshaper/shaper"
)

// FastpathConfig turns on the kernel fast path (package internal/fastpath):
// the rules the kernel can run are decided by an eBPF program at tcx
// ingress of Ifaces; the others' packets reach the queue with the punt
// mark (the divert rule matches it: scripts/rules.sh add --fastpath).
type FastpathConfig struct {
	Ifaces []string
	// Required: a program the kernel refuses is an error, not a fallback
	// to the whole policy in user space.
	Required bool
}

// fastCounts gives the kernel's counts of a rule by name, to add to the
// engine's in the snapshots (so status, metrics and the stats line count
// both paths).
type fastCounts struct {
	get func(name string) (shaper.RuleStats, bool)
}

// addFast adds the kernel's counts to the rules of a snapshot.
func addFast(fc *atomic.Pointer[fastCounts], rules []ruleSnap) {
	f := fc.Load()
	if f == nil {
		return
	}
	for i := range rules {
		if k, ok := f.get(rules[i].name); ok {
			r := &rules[i].RuleStats
			r.Packets += k.Packets
			r.Accepted += k.Accepted
			r.Dropped += k.Dropped
			r.ShadowDropped += k.ShadowDropped
			r.Marked += k.Marked
		}
	}
}
