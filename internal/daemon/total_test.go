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
// flows of a rule on queue 3, then six others on queue 4, charge the one
// 4-packet total of the engine that serves both: the first four pass, the
// other eight are over it.
func TestStatusTotals(t *testing.T) {
	sh, _ := decidedEngine(t, totalsPolicy, 1e18, []uint16{1000, 1001, 1002, 1003, 1004, 1005}, []uint16{1006, 1007, 1008, 1009, 1010, 1011})
	d := &state{cfg: &Config{}, sh: sh, mon: fakeMonitor{}}
	st := d.Status()
	if len(st.Totals) != 1 {
		t.Fatalf("status totals %+v, want one", st.Totals)
	}
	if got := st.Totals[0]; got.Name != "up" || got.Packets != 12 || got.Accepted != 4 || got.Dropped != 8 || got.Rate != 1 || got.Burst != 4 || got.Unit != "packets" {
		t.Errorf("status total %+v, want up: 12 packets, 4 accepted, 8 dropped", got)
	}
	if st.Rules[0].Total != "up" {
		t.Errorf("status rule %+v does not name its total", st.Rules[0])
	}
	want := `
# HELP packetshaper_total_dropped_total Packets over a total (dropped, or accepted by a shadow or marking rule).
# TYPE packetshaper_total_dropped_total counter
packetshaper_total_dropped_total{queue="3-4",total="up"} 8
`
	if err := testutil.CollectAndCompare(newCollector(d), strings.NewReader(want), "packetshaper_total_dropped_total"); err != nil {
		t.Error(err)
	}
	// The stats line: the total's group.
	var b strings.Builder
	d.logStats(slog.New(slog.NewTextHandler(&b, nil)), "stats", time.Second, true)
	if line := b.String(); !strings.Contains(line, " total.up.packets=12 total.up.accepted=4 total.up.dropped=8") {
		t.Errorf("the stats line lacks the total's counters:\n%s", line)
	}
}
