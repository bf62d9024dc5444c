//go:build linux

package fastpath

import (
	"errors"
	"math"
	"net/netip"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestFlowsListing runs the synthetic traffic of TestAgreement through the
// program and lists every kernel limit rule's map: the listing has exactly
// the flows the Go engine made of the packets the kernel decided (its keys,
// as flows.KeyConfig makes them), each once; FlowCount agrees; the insert
// counter counted each once (nothing evicted); and a listing's max bounds
// it.
func TestFlowsListing(t *testing.T) {
	f := mixed()
	s, p, eng := bothPaths(t, f)
	frames, times := traffic(5000, 11)
	want := map[int]map[flows.Key]bool{}
	var d shaper.Decision
	for i := range frames {
		fr := &frames[i]
		_, mark, iif := run(t, p, fr, times[i])
		if mark&s.PuntMark != 0 {
			continue
		}
		eng.DecidePacket(fr.ip, &shaper.Meta{Mark: fr.mark, InIf: iif}, times[i], &d)
		if d.Rule >= 0 && s.Entries[d.Rule].Action == Limit {
			if want[d.Rule] == nil {
				want[d.Rule] = map[flows.Key]bool{}
			}
			want[d.Rule][d.Key] = true
		}
	}
	now := times[len(times)-1]
	listed := 0
	for i, e := range s.Entries {
		if e.Action != Limit {
			if _, err := p.Flows(i, now, 0, func(*Flow) error { return nil }); !errors.Is(err, errNoTable) {
				t.Errorf("rule %s (%v): Flows error %v, want errNoTable", e.Name, e.Action, err)
			}
			continue
		}
		got := map[flows.Key]bool{}
		n, err := p.Flows(i, now, 0, func(fl *Flow) error {
			if fl.Rule != i {
				t.Errorf("rule %s: a flow of rule %d", e.Name, fl.Rule)
			}
			if got[fl.Key] {
				t.Errorf("rule %s: %s listed twice", e.Name, e.Key.Format(fl.Key))
			}
			got[fl.Key] = true
			if !want[i][fl.Key] {
				t.Errorf("rule %s: listed %s, a flow the Go engine did not make", e.Name, e.Key.Format(fl.Key))
			}
			if fl.Left < 0 || fl.Left > e.Limiter.Capacity() || fl.Last > now {
				t.Errorf("rule %s: flow %s: left %v (capacity %v), last %d (now %d)", e.Name, e.Key.Format(fl.Key), fl.Left, e.Limiter.Capacity(), fl.Last, now)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k := range want[i] {
			if !got[k] {
				t.Errorf("rule %s: flow %s not listed", e.Name, e.Key.Format(k))
			}
		}
		cnt, err := p.FlowCount(i)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := p.RuleCounters(i)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(want[i]) || cnt != n || rc.Inserts != uint64(n) {
			t.Errorf("rule %s: listed %d, counted %d, inserted %d; want %d each", e.Name, n, cnt, rc.Inserts, len(want[i]))
		}
		t.Logf("rule %s: %d flows", e.Name, n)
		listed += n
		if n > 2 {
			m, err := p.Flows(i, now, 2, func(*Flow) error { return nil })
			if err != nil || m != 2 {
				t.Errorf("rule %s: a listing of at most 2 gave %d (%v)", e.Name, m, err)
			}
		}
	}
	if listed < 20 {
		t.Errorf("only %d flows listed: the traffic exercised too little", listed)
	}
}

// TestFlowsLeft: a flow's Left is what its limiter would accept now, as
// shaper's Limiter.Left says, for the three kernel algorithms; and a flow
// idle past the rule's timeout is listed expired, with a fresh flow's.
func TestFlowsLeft(t *testing.T) {
	to := policy.Duration(10e9)
	f := &policy.File{Rules: []policy.Rule{
		{Name: "tb", PPS: ptr(10.0), Burst: ptr(5.0), Key: "src", FlowTimeout: to, Match: &policy.Match{Dst: []string{"10.8.0.1/32"}}},
		{Name: "fw", PPS: ptr(10.0), Algo: "fixed-window", Window: policy.Duration(1e9), Key: "src", Match: &policy.Match{Dst: []string{"10.8.0.2/32"}}},
		{Name: "swc", PPS: ptr(10.0), Algo: "sliding-window-counter", Window: policy.Duration(1e9), Key: "src", Match: &policy.Match{Dst: []string{"10.8.0.3/32"}}},
	}}
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	start := int64(1_700_000_000_000_000_000) // a whole second
	src := netip.MustParseAddr("10.1.0.1")
	// Three packets of each rule at start, then one more of the sliding
	// window's in the next window (400 ms in).
	for _, dst := range []string{"10.8.0.1", "10.8.0.2", "10.8.0.3"} {
		b := build(flowDesc{src, netip.MustParseAddr(dst), 17, 1, 2}, 64)
		for range 3 {
			if ret, _, _ := run(t, p, &frame{b: b, ip: b[14:]}, start); ret != tcOK {
				t.Fatalf("to %s: dropped", dst)
			}
		}
	}
	b := build(flowDesc{src, netip.MustParseAddr("10.8.0.3"), 17, 1, 2}, 64)
	if ret, _, _ := run(t, p, &frame{b: b, ip: b[14:]}, start+1_400_000_000); ret != tcOK {
		t.Fatal("swc: dropped")
	}
	at := start + 1_500_000_000
	for _, tc := range []struct {
		rule    int
		now     int64
		left    float64
		expired bool
	}{
		{0, start + 100_000_000, 2 + 1, false},    // 5 − 3, + 0.1 s × 10/s
		{0, start + 10_000_000_000, 5, false},     // full again after 0.3 s
		{0, start + 10_000_000_001, 5, true},      // idle past 10 s
		{1, start + 500_000_000, 7, false},        // 10 − 3 in the window
		{1, at, 10, false},                        // the next window
		{2, at, 10 - 1 - 3*0.5, false},            // 1 now, 3 × half the window left
		{2, start + 3_500_000_000, 10, false},     // windows later: nothing counts
		{2, start + 2_000_000_000, 10 - 1, false}, // the window after: 1 × a whole window
	} {
		var got *Flow
		n, err := p.Flows(tc.rule, tc.now, 0, func(fl *Flow) error { c := *fl; got = &c; return nil })
		if err != nil || n != 1 {
			t.Fatalf("rule %s: %d flows (%v), want 1", s.Entries[tc.rule].Name, n, err)
		}
		if math.Abs(got.Left-tc.left) > 1e-6 || got.Expired != tc.expired {
			t.Errorf("rule %s at +%d ms: left %v expired %v, want %v %v", s.Entries[tc.rule].Name, (tc.now-start)/1e6, got.Left, got.Expired, tc.left, tc.expired)
		}
		if want := netip.MustParseAddr("10.1.0.1").As16(); got.Key.Src != want && [4]byte(got.Key.Src[:4]) != src.As4() {
			t.Errorf("rule %s: key %v, want src 10.1.0.1", s.Entries[tc.rule].Name, got.Key)
		}
	}
}

// BenchmarkFlowCount: counting a rule's flow map of a million flows (what
// the daemon does every second per kernel limit rule), and listing it.
//
//	go test -run '^$' -bench FlowCount ./internal/fastpath
func BenchmarkFlowCount(b *testing.B) {
	const n = 1_000_000
	f := &policy.File{Rules: []policy.Rule{{Name: "per-src", PPS: ptr(10.0), Key: "src", MaxFlows: ptr(n)}}}
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := needKernel(b, s)
	keys := make([]fastpathFlowKey, 4096)
	vals := make([]fastpathFlowState, 4096)
	for i := 0; i < n; i += len(keys) {
		m := min(len(keys), n-i)
		for j := range m {
			x := uint32(i + j)
			keys[j] = fastpathFlowKey{Src: [16]byte{11, byte(x >> 16), byte(x >> 8), byte(x)}, Family: 4}
		}
		if _, err := p.tables[0].BatchUpdate(keys[:m], vals[:m], nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			c, err := p.FlowCount(0)
			if err != nil || c < n*9/10 {
				b.Fatalf("%d flows (%v)", c, err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Flows(0, 1, 0, func(*Flow) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
