//go:build linux

package fastpath

import (
	"slices"
	"testing"
	"time"

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

// TestReloadMovedRuleKeepsFlows: a kept limit rule finds its flows after a
// reload that moves it down the rule list (a rule inserted above it, as
// issue 26's moving reload does): the flow's bucket, emptied before the
// reload, is still empty after it, through BPF_PROG_TEST_RUN. (With the
// rule's position as its identity in the flow key, the moved rule missed
// its kept flows and started them afresh: the packet after the reload was
// accepted.)
func TestReloadMovedRuleKeepsFlows(t *testing.T) {
	lim := policy.Rule{Name: "lim", PPS: ptr(1.0), Burst: ptr(2.0), Match: &policy.Match{Proto: []string{"udp"}}}
	mk := func(rs ...policy.Rule) Spec {
		s, _, err := Compile(&policy.File{Rules: rs}, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	above := func(name string) policy.Rule {
		return policy.Rule{Name: name, Action: "accept", Match: &policy.Match{Proto: []string{"tcp"}, Dport: []string{"22"}}}
	}
	p := needKernel(t, mk(lim))
	fr := &frame{b: oneFlow()}
	now := int64(1_700_000_000_000_000_000)
	for i, want := range []int{tcOK, tcOK, tcShot} {
		if v, _, _ := run(t, p, fr, now); v != want {
			t.Fatalf("packet %d before the reloads: verdict %d, want %d", i, v, want)
		}
	}
	// The rule moves down by one, then two, then back to the top.
	for _, rs := range [][]policy.Rule{
		{above("a"), lim},
		{above("a"), above("b"), lim},
		{lim},
	} {
		np, err := Reload(mk(rs...), p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { np.Close() })
		if !slices.Equal(np.Kept, []string{"lim"}) {
			t.Fatalf("kept %v, want [lim]", np.Kept)
		}
		p.Close()
		p = np
		if v, _, _ := run(t, p, fr, now); v != tcShot {
			t.Fatalf("with lim at position %d of %d: the kept flow's empty bucket granted a packet (verdict %d)", len(rs)-1, len(rs), v)
		}
	}
}

// TestBootOffsetOnce: the kernel's time base (cfg.offset) is read once per
// process: a wall clock stepped between two loads does not move it, so
// that the flows a reload keeps see no jump.
func TestBootOffsetOnce(t *testing.T) {
	step := int64(0)
	saved := readBootOffset
	t.Cleanup(func() { readBootOffset = saved })
	readBootOffset = func() int64 {
		step -= int64(time.Hour) // the wall clock goes back an hour at each read
		return saved() + step
	}
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "lim", PPS: ptr(10.0)}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	q, err := Reload(s, p)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var a, b fastpathCfg
	if err := p.objs.Config.Lookup(uint32(0), &a); err != nil {
		t.Fatal(err)
	}
	if err := q.objs.Config.Lookup(uint32(0), &b); err != nil {
		t.Fatal(err)
	}
	if a.Offset != b.Offset {
		t.Errorf("the kernel's time base moved by %v between two loads", time.Duration(b.Offset-a.Offset))
	}
}
