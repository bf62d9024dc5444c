package testutil

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// TCXPrograms asks the kernel (BPF_PROG_QUERY) how many programs sit at
// tcx ingress of dev in the named network namespace ns.
func TCXPrograms(t testing.TB, ns, dev string) int {
	t.Helper()
	var n int
	err := Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		n = len(r.Programs)
		return nil
	})
	if err != nil {
		t.Fatalf("querying %s's tcx programs: %v", dev, err)
	}
	return n
}

// TCFilters counts packetshaper's tc filters (fastpath.TCName-PID at
// priority fastpath.TCPriority, 0x5053 = 20563) at ingress of dev in the
// namespace ns ("" for the test's own), as `tc filter show` lists them.
func TCFilters(t testing.TB, ns, dev string) int {
	t.Helper()
	args := []string{"tc", "filter", "show", "dev", dev, "ingress"}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "pref 20563 ") && strings.Contains(l, " handle 0x1 packetshaper-") {
			n++
		}
	}
	return n
}
