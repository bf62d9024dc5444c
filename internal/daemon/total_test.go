package daemon

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// totalsPolicy is a rule of 1 packet/s per flow charging a total of 4
// packets at once.
const totalsPolicy = `
[[total]]
name = "up"
pps = 1
burst = 4

[[rule]]
name = "r"
pps = 1
total = "up"
`

// TestStatusTotals: status and the metrics show a total's counters: six
// flows of a rule at 5 pps each charge a 4-packet total, summed over the
// engines (one per queue here).
func TestStatusTotals(t *testing.T) {
	var ws []*worker
	for q := range uint16(2) {
		w, _, _ := decidedWorker(t, 3+q, totalsPolicy, []uint16{1000, 1001, 1002, 1003, 1004, 1005}, 1e18)
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
	// The stats line: the total's group, summed over the engines.
	var b strings.Builder
	d.logStats(slog.New(slog.NewTextHandler(&b, nil)), "stats", time.Second, true)
	if line := b.String(); !strings.Contains(line, " total.up.packets=12 total.up.accepted=8 total.up.dropped=4") {
		t.Errorf("the stats line lacks the total's counters:\n%s", line)
	}
}
