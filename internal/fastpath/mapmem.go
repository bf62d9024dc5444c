//go:build linux

package fastpath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// MaxMapBytes is the most kernel memory the program's maps may take
// (MapMemory): a policy above it is refused with one line, as a program
// the kernel refuses is (the daemon then runs the whole policy through
// NFQUEUE, or exits with --fastpath-required). The flow maps are LRU hashes,
// preallocated whole: max-flows 4 194 304 in one rule would take about
// 650 MiB of kernel memory with no flow at all, outside the process's RSS.
const MaxMapBytes = 256 << 20

// Per-entry overheads of the kernel's maps, added to an entry's key and
// value (each rounded up to 8 bytes), as kernel/bpf/hashtab.c and
// lpm_trie.c lay them out on 64-bit kernels.
const (
	// htabElemOverhead: struct htab_elem before its key (the hash list
	// node, the LRU node or free-list pointers, the hash).
	htabElemOverhead = 48
	// lpmNodeOverhead: struct lpm_trie_node before its data (an RCU
	// head, two children, the prefix length and flags); the key's own
	// prefix length (4 bytes) is not stored in the data.
	lpmNodeOverhead = 40 - 4
	// bucketBytes: a hash map's buckets (struct bucket: a list head and
	// a lock), as many as its entries rounded up to a power of two.
	bucketBytes = 16
)

func round8(n uint32) uint64 { return (uint64(n) + 7) &^ 7 }

// buckets is a hash map's bucket memory for n entries.
func buckets(n uint64) uint64 {
	b := uint64(1)
	for b < n {
		b <<= 1
	}
	return b * bucketBytes
}

// mapBytes estimates the kernel memory of a map of spec m with entries
// entries: entries × (key + value + the type's per-entry overhead) and a hash's
// buckets, per
// CPU values counted on each of ncpu CPUs. An LPM trie is not
// preallocated: counted full, an upper bound.
func mapBytes(m *ebpf.MapSpec, entries uint32, ncpu int) uint64 {
	n := uint64(entries)
	k, v := round8(m.KeySize), round8(m.ValueSize)
	switch m.Type {
	case ebpf.Array:
		return n * v
	case ebpf.PerCPUArray:
		return n * v * uint64(ncpu)
	case ebpf.ArrayOfMaps, ebpf.HashOfMaps, ebpf.ProgramArray:
		return n * 8
	case ebpf.Hash, ebpf.LRUHash:
		return n*(htabElemOverhead+k+v) + buckets(n)
	case ebpf.PerCPUHash, ebpf.LRUCPUHash:
		return n*(htabElemOverhead+k+8+v*uint64(ncpu)) + buckets(n)
	case ebpf.LPMTrie:
		return n * (lpmNodeOverhead + k + v)
	}
	return n * (k + v)
}

// MapMemory estimates the kernel memory the program's maps take for s,
// from the map specs of the program's collection (bpf/*.c, whatever they
// hold): each map at its max entries, and each limit rule's flow maps (the
// collection's inner maps) at the sizes the loader makes them (flowMapSize).
func MapMemory(s Spec) (uint64, error) {
	cs, err := loadFastpath()
	if err != nil {
		return 0, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, m := range cs.Maps {
		total += mapBytes(m, m.MaxEntries, ncpu)
		if m.InnerMap == nil {
			continue
		}
		for i := range s.Entries {
			if e := &s.Entries[i]; e.Action == Limit {
				total += mapBytes(m.InnerMap, uint32(flowMapSize(m.Name, e.MaxFlows)), ncpu)
			}
		}
	}
	return total, nil
}

// CheckMapMemory is MapMemory, with an error above MaxMapBytes naming the
// largest flow map.
func CheckMapMemory(s Spec) (uint64, error) {
	b, err := MapMemory(s)
	if err != nil || b <= MaxMapBytes {
		return b, err
	}
	big, flows := "", 0
	for i := range s.Entries {
		if e := &s.Entries[i]; e.Action == Limit && e.MaxFlows > flows {
			big, flows = e.Name, e.MaxFlows
		}
	}
	return b, fmt.Errorf("the fast path's kernel maps would take %.0f MiB, more than the %d MiB maximum (flow maps are preallocated: rule %q alone has max-flows %d): lower max-flows or run fewer limit rules in the kernel",
		float64(b)/(1<<20), MaxMapBytes>>20, big, flows)
}
