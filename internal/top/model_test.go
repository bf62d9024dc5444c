package top

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/packetshaper/packetshaper/internal/control"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// snap builds a snapshot at t0+secs: one queue with its packets, accepted,
// dropped and fail-open passes; rule "web" with packets and dropped; and
// the flows given.
func snap(secs float64, q [4]uint64, web [2]uint64, listed int, fs ...control.Flow) *Snapshot {
	if listed == 0 {
		listed = len(fs)
	}
	return &Snapshot{
		At: t0.Add(time.Duration(secs * float64(time.Second))),
		Status: &control.Status{Version: "v1", PID: 7, UptimeSecs: 65, Policy: "p.toml", Mode: "fail-open",
			Queues: []control.Queue{{Queue: 0, Bound: true, Packets: q[0], Accepted: q[1], Dropped: q[2], FailOpenPassed: q[3]}},
			Rules: []control.Rule{
				{Name: "web", Action: "limit", Algorithm: "token-bucket", Rate: 100, Unit: "packets", Burst: 5, Packets: web[0], Accepted: web[0] - web[1], Dropped: web[1], Flows: 2},
				{Name: "rest", Action: "accept"},
			}},
		Flows:  fs,
		Listed: listed,
	}
}

func flow(key string, packets, dropped uint64) control.Flow {
	return control.Flow{Queue: 0, Rule: "web", Key: key, Packets: packets, Accepted: packets - dropped, Dropped: dropped}
}

func TestRatesOverTheInjectedInterval(t *testing.T) {
	var m Model
	m.Update(snap(0, [4]uint64{100, 90, 10, 0}, [2]uint64{50, 10}, 0, flow("a", 40, 10), flow("b", 10, 0)))
	if v := m.View(ByDrops, 0); v.Rated || v.Header.In != 0 || v.Rules[0].Rates.Packets != 0 || v.Flows[0].Known {
		t.Fatalf("first snapshot: rated %v, %+v", v.Rated, v)
	}
	m.Update(snap(2, [4]uint64{300, 250, 50, 8}, [2]uint64{250, 50}, 0, flow("a", 140, 30), flow("b", 110, 20)))
	v := m.View(ByDrops, 0)
	h := v.Header
	if !v.Rated || v.Interval != 2 || h.In != 100 || h.Accepted != 80 || h.Dropped != 20 || h.FailOpen != 4 || h.FailOpenTotal != 8 {
		t.Errorf("header: rated %v over %v: %+v; want 100 in, 80 accepted, 20 dropped, 4 fail-open per second", v.Rated, v.Interval, h)
	}
	if r := v.Rules[0].Rates; r.Packets != 100 || r.Dropped != 20 || r.Accepted != 80 {
		t.Errorf("rule web: %+v; want 100 packets, 80 accepted, 20 dropped per second", r)
	}
	// a: 100 packets, 20 dropped in 2 s; b: 100 packets, 20 dropped.
	// Equal rates: then the totals (a dropped 30, b 20).
	if len(v.Flows) != 2 || v.Flows[0].Key != "a" || v.Flows[0].Rates.Packets != 50 || v.Flows[0].Rates.Dropped != 10 || !v.Flows[0].Known {
		t.Errorf("flows: %+v", v.Flows)
	}
}

func TestClockBackwardsGivesNoRates(t *testing.T) {
	var m Model
	m.Update(snap(10, [4]uint64{100, 100, 0, 0}, [2]uint64{10, 0}, 0))
	for _, at := range []float64{10, 9} {
		m.Update(snap(at, [4]uint64{200, 200, 0, 0}, [2]uint64{20, 0}, 0))
		if v := m.View(ByDrops, 0); v.Rated || v.Header.In != 0 || v.Rules[0].Rates.Packets != 0 {
			t.Errorf("snapshot at %v s after one at 10 s: rated %v, in %v, rule %+v; want no rates", at, v.Rated, v.Header.In, v.Rules[0].Rates)
		}
	}
	// The baseline stays the one at 10 s.
	m.Update(snap(12, [4]uint64{300, 300, 0, 0}, [2]uint64{30, 0}, 0))
	if v := m.View(ByDrops, 0); !v.Rated || v.Header.In != 100 || v.Rules[0].Rates.Packets != 10 {
		t.Errorf("2 s after the baseline: %+v; want 100 in and 10 for the rule per second", v)
	}
}

func TestResetCounterCountsAfresh(t *testing.T) {
	var m Model
	m.Update(snap(0, [4]uint64{1000, 1000, 0, 0}, [2]uint64{500, 100}, 0, flow("a", 500, 100)))
	m.Update(snap(1, [4]uint64{30, 30, 0, 0}, [2]uint64{20, 5}, 0, flow("a", 7, 1)))
	v := m.View(ByDrops, 0)
	if v.Header.In != 30 || v.Rules[0].Rates.Packets != 20 || v.Rules[0].Rates.Dropped != 5 || v.Flows[0].Rates.Packets != 7 {
		t.Errorf("after a reset: in %v, rule %+v, flow %+v; want 30, 20/5, 7 per second (what was counted since)", v.Header.In, v.Rules[0].Rates, v.Flows[0].Rates)
	}
}

func TestNewFlowsAndCutListings(t *testing.T) {
	q, w := [4]uint64{}, [2]uint64{0, 0}
	// The previous listing held every flow: "new" came since, all of it
	// in the interval.
	var m Model
	m.Update(snap(0, q, w, 0, flow("a", 10, 0)))
	m.Update(snap(2, q, w, 0, flow("a", 10, 0), flow("new", 40, 20)))
	v := m.View(ByDrops, 0)
	if f := v.Flows[0]; f.Key != "new" || !f.Known || f.Rates.Packets != 20 || f.Rates.Dropped != 10 {
		t.Errorf("a new flow after a whole listing: %+v", v.Flows)
	}
	// The previous listing was cut (3 flows, 1 listed): "other" may have
	// been there: unknown, last.
	var c Model
	c.Update(snap(0, q, w, 3, flow("a", 10, 0)))
	c.Update(snap(2, q, w, 3, flow("other", 1000, 900), flow("a", 12, 0)))
	v = c.View(ByDrops, 0)
	if v.Flows[0].Key != "a" || !v.Flows[0].Known || v.Flows[1].Key != "other" || v.Flows[1].Known || v.Flows[1].Rates.Packets != 0 {
		t.Errorf("after a cut listing: %+v; want a known first, other unknown last", v.Flows)
	}
}

func TestSortAndRows(t *testing.T) {
	var m Model
	m.Update(snap(0, [4]uint64{}, [2]uint64{}, 0, flow("busy", 0, 0), flow("dropper", 0, 0), flow("idle", 0, 0)))
	m.Update(snap(1, [4]uint64{}, [2]uint64{}, 0, flow("busy", 1000, 10), flow("dropper", 100, 90), flow("idle", 1, 0)))
	keys := func(v View) string {
		var ks []string
		for _, f := range v.Flows {
			ks = append(ks, f.Key)
		}
		return strings.Join(ks, ",")
	}
	if v := m.View(ByDrops, 0); keys(v) != "dropper,busy,idle" || v.Sort != "drops/s" {
		t.Errorf("by drops: %s (%s)", keys(v), v.Sort)
	}
	if v := m.View(ByPackets, 0); keys(v) != "busy,dropper,idle" {
		t.Errorf("by packets: %s", keys(v))
	}
	if v := m.View(ByPackets, 2); keys(v) != "busy,dropper" || v.More != 1 {
		t.Errorf("by packets, 2 rows: %s, %d more", keys(v), v.More)
	}
	if ByDrops.Next() != ByPackets || ByPackets.Next() != ByDrops {
		t.Error("s does not cycle drops → packets → drops")
	}
}

func TestMemoryBounded(t *testing.T) {
	var fs []control.Flow
	for i := range 3 * MaxFlows {
		fs = append(fs, flow(fmt.Sprint(i), uint64(i), 0))
	}
	var m Model
	m.Update(snap(0, [4]uint64{}, [2]uint64{}, len(fs), fs...))
	m.Update(snap(1, [4]uint64{}, [2]uint64{}, len(fs), fs...))
	if len(m.flows) > MaxFlows || len(m.frows) > MaxFlows {
		t.Errorf("the model keeps %d previous counters and %d rows; want at most %d", len(m.flows), len(m.frows), MaxFlows)
	}
}

func TestRenderFitsTheTerminal(t *testing.T) {
	var fs []control.Flow
	for i := range 50 {
		fs = append(fs, flow(fmt.Sprintf("udp 10.0.0.1:%d > 10.0.0.2:9000 with a long key to cut", 20000+i), uint64(100*i), uint64(i)))
	}
	var m Model
	m.Update(snap(0, [4]uint64{}, [2]uint64{}, 0, fs...))
	for i := range fs {
		fs[i].Packets *= 2
		fs[i].Dropped *= 2
		fs[i].Accepted = fs[i].Packets - fs[i].Dropped
	}
	m.Update(snap(1, [4]uint64{500, 400, 100, 0}, [2]uint64{300, 100}, 0, fs...))
	for _, l := range []Layout{{120, 40}, {80, 24}, {40, 10}, {200, 5}, {30, 3}} {
		v := m.View(ByDrops, l.FlowRows(len(m.rows)))
		lines := Render(&v, l, "")
		if len(lines) > l.Height {
			t.Errorf("%dx%d: %d lines", l.Width, l.Height, len(lines))
		}
		for _, x := range lines {
			if n := utf8.RuneCountInString(x.Text); n > l.Width {
				t.Errorf("%dx%d: a line of %d characters: %q", l.Width, l.Height, n, x.Text)
			}
		}
		if l.Height == 40 {
			text := ""
			for _, x := range lines {
				text += x.Text + "\n"
			}
			if len(lines) != 40 || !strings.Contains(text, "in 500 pkt/s  accepted 400/s  dropped 100/s") ||
				!strings.Contains(text, "web  100 pkt/s tb b5      300      200      100") || !strings.Contains(text, "20049") {
				t.Errorf("120x40 frame:\n%s", text)
			}
		}
	}
}

// TestTotalsAsRules: a total is a row below the rules, "total NAME", with
// its limit and its rates over the interval (dropped: over the total).
func TestTotalsAsRules(t *testing.T) {
	var m Model
	s0 := snap(0, [4]uint64{100, 90, 10, 0}, [2]uint64{50, 10}, 0)
	s0.Status.Totals = []control.Total{{Name: "up", Algorithm: "token-bucket", Rate: 400, Unit: "packets", Burst: 20, Packets: 50, Accepted: 40, Dropped: 10}}
	m.Update(s0)
	s1 := snap(2, [4]uint64{300, 250, 50, 0}, [2]uint64{250, 50}, 0)
	s1.Status.Totals = []control.Total{{Name: "up", Algorithm: "token-bucket", Rate: 400, Unit: "packets", Burst: 20, Packets: 250, Accepted: 200, Dropped: 50}}
	m.Update(s1)
	v := m.View(ByDrops, 0)
	if len(v.Rules) != 3 {
		t.Fatalf("rules %+v, want web, rest and the total", v.Rules)
	}
	r := v.Rules[2]
	if r.Name != "total up" || r.Limit != "400 pkt/s tb b20" || r.Rates.Packets != 100 || r.Rates.Accepted != 80 || r.Rates.Dropped != 20 {
		t.Errorf("the total's row %+v; want total up, 400 pkt/s tb b20, 100 packets, 80 accepted, 20 dropped per second", r)
	}
}
