package e2e

import (
	"strconv"
	"strings"
	"testing"
)

// TestFastpathRulesDefrag: the fast path's divert rule (rules.sh add
// --fastpath) keeps the kernel's defragmentation on in the namespace
// without connection tracking: a counter of fragments in mangle
// PREROUTING (after the defragmentation hook, priority -400) counts a
// fragmented ping's fragments before the rule and none after it, and
// conntrack holds no entry; with --conntrack (the rule of ct-state
// policies) the ping's datagrams are reassembled and tracked.
func TestFastpathRulesDefrag(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	tp.must(tp.B, "iptables", "-w", "-t", "mangle", "-A", "PREROUTING", "-f", "-m", "comment", "--comment", "e2e fragments")
	frags := func() int {
		out := tp.must(tp.B, "iptables", "-w", "-t", "mangle", "-L", "PREROUTING", "-v", "-n", "-x")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "e2e fragments") {
				n, err := strconv.Atoi(strings.Fields(l)[0])
				if err != nil {
					t.Fatalf("counter of %q: %v", l, err)
				}
				return n
			}
		}
		t.Fatalf("no fragment counter in:\n%s", out)
		return 0
	}
	tracked := func() int {
		out, err := tp.run(tp.B, "cat", "/proc/sys/net/netfilter/nf_conntrack_count")
		if err != nil {
			return 0 // no conntrack in the kernel's namespace at all
		}
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	ping := func() { tp.must(tp.A, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-s", "3000", tp.IPB) }

	ping()
	before := frags()
	if before == 0 {
		t.Fatalf("without a divert rule the fragment counter saw none of 3 fragmented pings: the check cannot tell defragmentation on from off")
	}
	tp.rules("add", "--fastpath", "--queue", "3")
	ping()
	if got := frags(); got != before {
		t.Errorf("with add --fastpath the fragment counter went from %d to %d: the fragments were not reassembled before mangle PREROUTING", before, got)
	}
	if n := tracked(); n != 0 {
		t.Errorf("with add --fastpath conntrack holds %d entries, want 0 (no connection tracking)", n)
	}
	tp.rules("del", "--fastpath", "--queue", "3")
	tp.rules("add", "--fastpath", "--conntrack", "--queue", "3")
	ping()
	if got := frags(); got != before {
		t.Errorf("with add --fastpath --conntrack the fragment counter went from %d to %d", before, got)
	}
	if n := tracked(); n == 0 {
		t.Errorf("with add --fastpath --conntrack conntrack holds no entry after a ping, want the ping's")
	}
	tp.rules("del", "--all")
}
