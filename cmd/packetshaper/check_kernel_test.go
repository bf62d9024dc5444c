package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCheckFastpathKernel: check --fastpath also says which Linux release
// the program needs by each attach mode (read from the object: today
// bpf_loop, 5.17; tcx 6.6) and what older kernels lose, and the kernel
// memory of its maps; a max-flows over the maximum is said, not an error
// (the policy runs, through NFQUEUE).
func TestCheckFastpathKernel(t *testing.T) {
	for _, c := range []struct {
		flows string
		want  string
	}{
		{"65536", " MiB preallocated (at most 256 MiB)"},
		{"4194304", "over the 256 MiB maximum: packetshaper --fastpath would refuse the program"},
	} {
		pol := writeFile(t, "p.toml", "[[rule]]\nname = \"tb\"\nmatch.proto = [\"udp\"]\npps = 100\nmax-flows = "+c.flows+"\n")
		var out, errb bytes.Buffer
		if code := run([]string{"check", "--fastpath", pol}, &out, &errb); code != 0 {
			t.Fatalf("check --fastpath: %d %s", code, errb.String())
		}
		e := errb.String()
		wantLines(t, "max-flows "+c.flows+": check --fastpath's stderr", e,
			"packetshaper check: fastpath kernel: the program needs Linux ",
			"attached by tcx from 6.6, by tc (clsact + cls_bpf",
			"on an older kernel the kernel refuses the program and the whole policy runs through NFQUEUE",
			c.want)
		if strings.Contains(e, "bpf_loop") != strings.Contains(e, "needs Linux 5.17") {
			t.Errorf("the release does not follow the helpers named:\n%s", e)
		}
	}
}
