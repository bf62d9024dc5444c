package fastpath

import "fmt"

// CheckLines are packetshaper check --fastpath's lines on the kernel for
// spec: the Linux release each attach mode needs, and the kernel memory
// the program's maps would take (over MaxMapBytes, packetshaper
// --fastpath refuses the program and runs the whole policy through
// NFQUEUE). What cannot be told here (not Linux) is left out.
func CheckLines(spec Spec) []string {
	var out []string
	if s, err := KernelNeeds(); err == nil {
		out = append(out, "fastpath kernel: "+s)
	}
	b, err := MapMemory(spec)
	switch {
	case err != nil:
	case b > MaxMapBytes:
		out = append(out, fmt.Sprintf("fastpath kernel maps: %.1f MiB, over the %d MiB maximum: packetshaper --fastpath would refuse the program and run the whole policy through NFQUEUE (lower max-flows)", float64(b)/(1<<20), MaxMapBytes>>20))
	default:
		out = append(out, fmt.Sprintf("fastpath kernel maps: %.1f MiB preallocated (at most %d MiB)", float64(b)/(1<<20), MaxMapBytes>>20))
	}
	return out
}
