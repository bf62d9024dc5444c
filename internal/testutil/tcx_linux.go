package testutil

import (
	"net"
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
