package replay

import (
	"path/filepath"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestFlowsShadowAndMarks: per flow, the packets over the limit of a
// shadow rule are counted as shadow-dropped and those of a marking rule as
// marked, not as dropped, as the rule's own counters count them: per rule,
// the flows' dropped, shadow-dropped and marked add up to the rule's (no
// flow evicted or expired here), and each flow's packets are its accepted
// plus its dropped. (Rules that accept or drop outright keep no flows.)
func TestFlowsShadowAndMarks(t *testing.T) {
	comp, markComp := compileMix(t)
	for _, c := range []struct {
		name  string
		comp  *policy.Compiled
		files []string
	}{
		{"policy-mix", comp, []string{"policy-mix.pcapng"}},
		{"mark", markComp, []string{"policy-mix.pcapng", "multiflow.pcap"}},
	} {
		eng, err := shaper.NewPolicy(c.comp.Policy())
		if err != nil {
			t.Fatal(err)
		}
		r := New(eng, Options{IfaceID: c.comp.IfaceID})
		for _, f := range c.files {
			if err := r.ReplayFile(filepath.Join(testdata, f)); err != nil {
				t.Fatal(err)
			}
		}
		if s := r.Summary(); s.Evictions != 0 || s.Expired != 0 {
			t.Fatalf("%s: %d evicted, %d expired: the flows would not add up", c.name, s.Evictions, s.Expired)
		}
		rules := r.Rules()
		type sums struct{ dropped, shadow, marked uint64 }
		got := make([]sums, len(rules))
		var first *FlowSummary
		r.EachFlow(func(f FlowSummary) {
			if first == nil {
				first = &f
			}
			if f.Packets != f.Accepted+f.Dropped {
				t.Errorf("%s: flow %s: packets %d != accepted %d + dropped %d", c.name, f.Flow, f.Packets, f.Accepted, f.Dropped)
			}
			got[f.Rule].dropped += f.Dropped
			got[f.Rule].shadow += f.ShadowDropped
			got[f.Rule].marked += f.Marked
		})
		var shadow, marked uint64
		for i, ru := range rules {
			if eng.Rule(i).Action != shaper.ActionLimit {
				continue // no flows: accept, drop
			}
			if want := (sums{ru.Dropped, ru.ShadowDropped, ru.Marked}); got[i] != want {
				t.Errorf("%s: rule %s: flows' dropped, shadow-dropped, marked %v; the rule's %v", c.name, ru.Name, got[i], want)
			}
			shadow += ru.ShadowDropped
			marked += ru.Marked
		}
		if c.name == "policy-mix" && shadow == 0 || c.name == "mark" && marked == 0 {
			t.Errorf("%s: the case should have shadow drops (%d) or marks (%d)", c.name, shadow, marked)
		}
		// The top flows: the same counts as EachFlow's, in its order.
		if top := r.Flows(1); first == nil || len(top) != 1 || top[0] != *first {
			t.Errorf("%s: Flows(1) = %+v, EachFlow's first %+v", c.name, top, first)
		}
	}
}
