package fastpath

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
)

// TestCompileTotalPunts: a rule that charges a total runs in user space
// (the kernel keeps no state per total: a kernel rule would pass its
// packets uncharged, a way around the total); a rule beside it without one
// stays in the kernel.
func TestCompileTotalPunts(t *testing.T) {
	f := &policy.File{
		Totals: []policy.TotalDef{{Name: "up", PPS: pf(400)}},
		Rules: []policy.Rule{
			{Name: "t", PPS: pf(100), Key: "src", Total: "up", Match: &policy.Match{Proto: []string{"udp"}}},
			{Name: "plain", PPS: pf(100), Key: "src"},
		},
	}
	s, reasons, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := reasons[0]; r.Kernel || s.Entries[0].Action != Punt || !strings.Contains(r.Why, `charges total "up"`) {
		t.Errorf("rule with a total: %s (action %v), want user space", r, s.Entries[0].Action)
	}
	if r := reasons[1]; !r.Kernel {
		t.Errorf("rule without a total: %s, want kernel", r)
	}
}
