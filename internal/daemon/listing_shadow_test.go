package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/nfq"
)

var shadowListPolicy = rule("enforced", udpSport(1000), "pps = 0.001", "burst = 1") +
	rule("trial", udpSport(1001), "pps = 0.001", "burst = 1", `mode = "shadow"`) +
	rule("marking", udpSport(1002), "pps = 0.001", "burst = 1", `on-exceed = "mark"`, `set-mark = "0x1/0x1"`)

// TestListFlowsShadowMarks: a listing (packetshaper flows) counts the
// packets over a shadow rule's limit as shadow_dropped and those over a
// marking rule's as marked, accepted, not dropped, as the rules' counters
// (status) do; an enforcing rule's are dropped.
func TestListFlowsShadowMarks(t *testing.T) {
	w := newTestWorker(t, shadowListPolicy)
	var batch []nfq.Packet
	for _, sport := range []uint16{1000, 1001, 1002} {
		for range 4 {
			d := udpFrom(1, sport)
			batch = append(batch, nfq.Packet{Data: d, Len: len(d)})
		}
	}
	w.decide(batch, make([]nfq.Verdict, len(batch)), int64(2e18))
	r := startFakeRun(w, time.Millisecond, nil)
	defer r.halt()
	d := &state{cfg: &Config{}, sh: w.shared}
	got := map[string]control.Flow{}
	if err := d.Flows(context.Background(), "", func(f *control.Flow) error { got[f.Rule] = *f; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]control.Flow{
		"enforced": {Packets: 4, Accepted: 1, Dropped: 3},
		"trial":    {Packets: 4, Accepted: 4, ShadowDropped: 3},
		"marking":  {Packets: 4, Accepted: 4, Marked: 3},
	}
	for rule, wf := range want {
		f := got[rule]
		if f.Packets != wf.Packets || f.Accepted != wf.Accepted || f.Dropped != wf.Dropped || f.ShadowDropped != wf.ShadowDropped || f.Marked != wf.Marked {
			t.Errorf("rule %s's flow: packets %d accepted %d dropped %d shadow_dropped %d marked %d; want %d %d %d %d %d",
				rule, f.Packets, f.Accepted, f.Dropped, f.ShadowDropped, f.Marked, wf.Packets, wf.Accepted, wf.Dropped, wf.ShadowDropped, wf.Marked)
		}
	}
	// As the rules' counters say.
	for i := range w.eng.NumRules() {
		rs, name := w.eng.RuleStats(i), w.eng.Rule(i).Name
		if f := got[name]; rs.Dropped != f.Dropped || rs.ShadowDropped != f.ShadowDropped || rs.Marked != f.Marked || rs.Accepted != f.Accepted {
			t.Errorf("rule %s: counters %+v, its one flow %+v", name, rs, f)
		}
	}
}
