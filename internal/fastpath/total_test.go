package fastpath

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
)

// TestCompileTotalSplit: a total whose rules all run in the kernel runs
// there with them (the rules' entries name it, Spec.Totals holds it); a
// total one of whose rules runs in user space (here a shaping one) takes
// all its rules there, with the reason (a total decided apart in both
// places would pass up to twice its rate); a global total's rules run in
// user space; a rule without a total stays in the kernel.
func TestCompileTotalSplit(t *testing.T) {
	f := &policy.File{
		Redis:  &policy.Redis{Addrs: []string{"127.0.0.1:6379"}},
		Totals: []policy.TotalDef{{Name: "up", PPS: pf(400)}, {Name: "mixed", PPS: pf(400)}, {Name: "fleet", PPS: pf(400), Scope: "global"}},
		Rules: []policy.Rule{
			{Name: "k1", PPS: pf(100), Key: "src", Total: "up", Match: &policy.Match{Proto: []string{"udp"}}},
			{Name: "k2", PPS: pf(100), Key: "src", Total: "up", Match: &policy.Match{Proto: []string{"tcp"}}},
			{Name: "m1", PPS: pf(100), Key: "src", Total: "mixed", Match: &policy.Match{Dport: []string{"81"}, Proto: []string{"udp"}}},
			{Name: "m2", PPS: pf(100), Key: "src", Total: "mixed", Algo: "leaky-bucket", Match: &policy.Match{Dport: []string{"82"}, Proto: []string{"udp"}}},
			{Name: "g", PPS: pf(100), Key: "src", Total: "fleet", Match: &policy.Match{Dport: []string{"83"}, Proto: []string{"udp"}}},
			{Name: "plain", PPS: pf(100), Key: "src"},
		},
	}
	s, reasons, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		kernel bool
		total  string
		why    string
	}{
		{true, "up", `within total "up"`},
		{true, "up", `within total "up"`},
		{false, "", `charges total "mixed", which rule "m2" charges in user space`},
		{false, "", "shapes"},
		{false, "", `charges total "fleet", a global one`},
		{true, "", "limit"},
	} {
		r, e := reasons[i], s.Entries[i]
		if r.Kernel != want.kernel || (e.Action != Punt) != want.kernel || e.Total != want.total || !strings.Contains(r.Why, want.why) {
			t.Errorf("%s (action %v, total %q), want kernel %v, total %q, a reason with %q", r, e.Action, e.Total, want.kernel, want.total, want.why)
		}
	}
	if len(s.Totals) != 1 || s.Totals[0].Name != "up" || s.Totals[0].BurstN == 0 {
		t.Errorf("kernel totals %+v, want only up's", s.Totals)
	}
}
