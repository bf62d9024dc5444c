//go:build linux

package fastpath

import (
	"slices"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
)

// TestReloadKeepsUnchanged: Reload gives an unchanged limit rule (same name,
// same entry) the old program's flow map, with its flows, and a changed
// one a new, empty map.
func TestReloadKeepsUnchanged(t *testing.T) {
	mk := func(pps float64) Spec {
		f := &policy.File{Rules: []policy.Rule{
			{Name: "same", PPS: ptr(10.0), Match: &policy.Match{Proto: []string{"udp"}}},
			{Name: "changed", PPS: ptr(pps)},
		}}
		s, _, err := Compile(f, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := needKernel(t, mk(5))
	// One flow in each rule's map.
	k := make([]byte, old.tables[0].KeySize())
	v := make([]byte, old.tables[0].ValueSize())
	k[0], v[0] = 1, 7
	for i := 0; i < 2; i++ {
		if err := old.tables[i].Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Reload(mk(6), old)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !slices.Equal(p.Kept, []string{"same"}) {
		t.Errorf("kept %v, want [same]", p.Kept)
	}
	old.Close() // the kept map lives on in p
	got := make([]byte, len(v))
	if err := p.tables[0].Lookup(k, &got); err != nil || got[0] != 7 {
		t.Errorf("the unchanged rule's flow after the reload: %v %v", got, err)
	}
	if err := p.tables[1].Lookup(k, &got); err == nil {
		t.Errorf("the changed rule kept its flow")
	}
}
