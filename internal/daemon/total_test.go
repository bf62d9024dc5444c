package daemon

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestStatusTotals: status and the metrics show a total's counters: six
// flows of a rule at 5 pps each charge a 4-packet total, summed over the
// engines (one per queue here).
func TestStatusTotals(t *testing.T) {
	const text = `
[[total]]
name = "up"
pps = 1
burst = 4

[[rule]]
name = "r"
pps = 1
total = "up"
`
	var ws []*worker
	for q := range 2 {
		eng, err := shaper.NewPolicy(compilePolicy(t, text))
		if err != nil {
			t.Fatal(err)
		}
		w := newWorker(uint16(3+q), eng)
		fq := &fakeQueue{}
		w.q, w.wake = fq, fq.Wake
		var batch []nfq.Packet
		for sp := range uint16(6) {
			d := udp4(1000 + sp)
			batch = append(batch, nfq.Packet{Data: d, Len: len(d)})
		}
		w.decide(batch, make([]nfq.Verdict, len(batch)), 1e18)
		w.snapshot(1e18)
		ws = append(ws, w)
	}
	d := &state{cfg: &Config{}, ws: ws, mon: fakeMonitor{}}
	st := d.Status()
	if len(st.Totals) != 1 {
		t.Fatalf("status totals %+v, want one", st.Totals)
	}
	if got := st.Totals[0]; got.Name != "up" || got.Packets != 12 || got.Accepted != 8 || got.Dropped != 4 || got.Rate != 1 || got.Burst != 4 || got.Unit != "packets" {
		t.Errorf("status total %+v, want up: 12 packets, 8 accepted, 4 dropped", got)
	}
	if st.Rules[0].Total != "up" {
		t.Errorf("status rule %+v does not name its total", st.Rules[0])
	}
	want := `
# HELP packetshaper_total_dropped_total Packets over a total (dropped, or accepted by a shadow or marking rule).
# TYPE packetshaper_total_dropped_total counter
packetshaper_total_dropped_total{queue="3",total="up"} 2
packetshaper_total_dropped_total{queue="4",total="up"} 2
`
	if err := testutil.CollectAndCompare(newCollector(d), strings.NewReader(want), "packetshaper_total_dropped_total"); err != nil {
		t.Error(err)
	}
}
