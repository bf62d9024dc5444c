//go:build linux

package fastpath

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// skbMarkOff is the offset of mark in struct __sk_buff (len, pkt_type,
// mark).
const skbMarkOff = 8

// LoadPuntAll loads the program that hands every packet to user space: it
// ors mark into skb->mark and passes the packet on (TCX_NEXT). It is the
// fallback when the kernel refuses the fast path: the divert rule, which
// matches the punt mark, then queues every packet, and the whole policy
// runs through NFQUEUE. Five instructions, built here (no clang).
func LoadPuntAll(mark uint32) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "punt_all",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, skbMarkOff, asm.Word),
			asm.Or.Imm32(asm.R2, int32(mark)),
			asm.StoreMem(asm.R1, skbMarkOff, asm.R2, asm.Word),
			asm.Mov.Imm(asm.R0, -1), // TCX_NEXT
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("loading the punt-everything program: %s", oneLine(err.Error()))
	}
	return p, nil
}
