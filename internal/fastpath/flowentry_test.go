//go:build linux

package fastpath

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/packetshaper/packetshaper/policy"
)

// TestFlowEntrySize: a flow's element in its rule's LRU map (the kernel's
// struct htab_elem header, then the key and the state, each rounded up to
// 8 bytes: kernel/bpf/hashtab.c) is at most 128 bytes, two cache lines, and
// the flow maps' key and value are the Go types bpf2go made of struct
// flow_key and struct flow_state (the one layout). At 1fdb35f (a 44-byte
// key with the rule and key mode, a 56-byte state) it was 152.
func TestFlowEntrySize(t *testing.T) {
	k, v := uint32(unsafe.Sizeof(fastpathFlowKey{})), uint32(unsafe.Sizeof(fastpathFlowState{}))
	if e := htabElemOverhead + round8(k) + round8(v); e > 128 {
		t.Errorf("a flow's LRU element is %d bytes (key %d, state %d): more than two cache lines", e, k, v)
	}
	if k%4 != 0 {
		t.Errorf("flow key of %d bytes: not a multiple of 4 (the kernel hashes it by bytes, not words)", k)
	}
	cs, err := loadFastpath()
	if err != nil {
		t.Fatal(err)
	}
	in := cs.Maps[fastpathMapFlows].InnerMap
	if in.KeySize != k || in.ValueSize != v {
		t.Errorf("flow maps' key %d and value %d bytes, the Go types' %d and %d", in.KeySize, in.ValueSize, k, v)
	}
}

// TestSeenTimeRange: the seen time shares its word with the lock
// (bpf/flowstate.h), so it holds 0 to 2^62 - 1 ns; a packet of a later time
// goes to user space uncharged (the engine decides it), one of the range is
// decided in the kernel. Without the program's check the packet at 2^62
// was decided in the kernel, its seen time cut to 0.
func TestSeenTimeRange(t *testing.T) {
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(1.0), Burst: ptr(1.0)}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	fr := &frame{b: build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)}
	last := int64(1)<<(64-fastpathLockWordLOCK_BITS) - 1
	for _, c := range []struct {
		now  int64
		punt bool
		why  string
	}{
		{1 << 62, true, "2^62 ns, beyond the seen word"},
		{-1, true, "a negative time"},
		{last, false, "2^62 - 1 ns, the last time the word holds"},
	} {
		v, mark, _ := run(t, p, fr, c.now)
		if got := mark&s.PuntMark != 0; got != c.punt || v != tcOK {
			t.Errorf("%s: verdict %d, punted %v; want accepted, punted %v", c.why, v, got, c.punt)
		}
	}
	n := 0
	if _, err := p.Flows(0, last, 0, func(f *Flow) error {
		n++
		if f.Last != last {
			t.Errorf("listed flow's last packet at %d, want %d", f.Last, last)
		}
		return nil
	}); err != nil || n != 1 {
		t.Errorf("%d flows listed (%v), want the one decided in the kernel", n, err)
	}
}
