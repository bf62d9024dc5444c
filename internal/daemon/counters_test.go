package daemon

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/packetshaper/packetshaper/internal/control"
	tu "github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/nfq"
)

// lineValues flattens a stats line's attributes: "packets", "rule.a.dropped".
func lineValues(attrs []any) map[string]any {
	m := map[string]any{}
	var walk func(prefix string, as []slog.Attr)
	walk = func(prefix string, as []slog.Attr) {
		for _, a := range as {
			if a.Value.Kind() == slog.KindGroup {
				walk(prefix+a.Key+".", a.Value.Group())
				continue
			}
			m[prefix+a.Key] = a.Value.Any()
		}
	}
	r := slog.Record{}
	r.Add(attrs...)
	var as []slog.Attr
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	walk("", as)
	return m
}

var updateReference = flag.Bool("update-reference", false, "rewrite docs/metrics-reference.md")

const referencePath = "../../docs/metrics-reference.md"

// TestMetricsReference: docs/metrics-reference.md is what the counters
// make of it (go generate ./internal/daemon rewrites it).
func TestMetricsReference(t *testing.T) {
	want := metricsReference()
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (go generate ./internal/daemon makes it)", err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: run go generate ./internal/daemon", referencePath)
	}
	for i := range counters {
		if c := &counters[i]; c.Metric != "" && !strings.Contains(want, "`"+c.Metric+"`") {
			t.Errorf("the reference lacks %s", c.Metric)
		}
	}
}

// TestCountersWellFormed: every family is declared once, with a help; every
// stats-line key once per scope group; every counter appears somewhere.
func TestCountersWellFormed(t *testing.T) {
	metrics := map[string]bool{}
	keys := map[string]bool{}
	for _, c := range counters {
		if c.Metric == "" && c.Key == "" || c.Help == "" || c.get == nil {
			t.Errorf("counter %+v: no name, help or getter", c)
		}
		if c.Metric != "" {
			if metrics[c.Metric] {
				t.Errorf("%s declared twice", c.Metric)
			}
			metrics[c.Metric] = true
		}
		if c.Key != "" {
			k := c.Key
			switch c.from {
			case fromRule, fromGlobalRule:
				k = "rule." + k
			case fromTotal:
				k = "total." + k
			}
			if keys[k] {
				t.Errorf("stats-line key %s twice", k)
			}
			keys[k] = true
		}
	}
	for _, d := range distributions {
		if metrics[d.Metric] {
			t.Errorf("%s declared twice", d.Metric)
		}
		metrics[d.Metric] = true
	}
}

// names reports whether the Go string literal l is name, a metric family
// with it (packetshaper_rule_name_total), or a struct tag naming it
// (json:"name").
func names(l, name string) bool {
	if v, err := strconv.Unquote(l); err == nil && (v == name || strings.HasPrefix(v, "packetshaper_") && strings.Contains(v+"_", "_"+name+"_")) {
		return true
	}
	return strings.HasPrefix(l, "`") && (strings.Contains(l, `"`+name+`"`) || strings.Contains(l, `"`+name+`,`))
}

// TestCounterNamesOnce: a counter's name (its stats-line key with an
// underscore, e.g. shadow_dropped, shape_overflow, failopen_passed) is a
// string literal (or a struct tag's name) in at most 2 non-test Go files,
// with no exception: where it is declared (the counters' table, or
// countname and failopen for the names other outputs write too: replay's
// --json and summary, the report's totals) and, for status and the flow
// listing, control's JSON tags (which cannot take a constant;
// control's TestTagsAreCountNames holds them to countname).
func TestCounterNamesOnce(t *testing.T) {
	lits := tu.Literals(t, "../..") // file: its string literals
	for _, name := range []string{"shadow_dropped", "shape_overflow", "failopen_passed"} {
		if !slices.ContainsFunc(counters, func(c counter) bool { return c.Key == name }) {
			t.Errorf("no counter %s", name)
		}
	}
	for _, c := range counters {
		if !strings.Contains(c.Key, "_") {
			continue // "packets", "dropped": words of any help text
		}
		var in []string
		for path, ls := range lits {
			if slices.ContainsFunc(ls, func(l string) bool { return names(l, c.Key) }) {
				in = append(in, path)
			}
		}
		if len(in) > 2 {
			slices.Sort(in)
			t.Errorf("counter %s is named in %d files: %v", c.Key, len(in), in)
		}
	}
}

// TestStatsLineOnlyMoved: the periodic stats line carries the counters not
// 0, grouped by scope (queue before engine, fail-open, shaping, rules); the
// final line carries every counter, with the same values.
func TestStatsLineOnlyMoved(t *testing.T) {
	d, _ := testState(t)
	final := lineValues(d.statsAttrs(time.Second, true))
	periodic := lineValues(d.statsAttrs(time.Second, false))
	// Queue 3: 6 packets (3 dropped), queue 4: 6 (2 dropped); the
	// kernel's socket drops 6 each; queue 3 passed 1234567 by fail-open
	// (the monitor's total, fakeMonitor's, is 0: the line's fail-open is
	// the total's).
	for k, want := range map[string]any{
		"packets": uint64(12), "accepted": uint64(7), "dropped": uint64(5), "socket_drops": uint64(12), "queue_drops": uint64(10),
		"queued": uint64(10), "flows": uint64(2), "batches": uint64(2), "verdict_msgs": uint64(4),
		"rule.a.packets": uint64(5), "rule.a.dropped": uint64(3), "rule.b.packets": uint64(5), "rule.b.dropped": uint64(2),
		"rule.rest.accepted": uint64(2),
	} {
		if final[k] != want || periodic[k] != want {
			t.Errorf("%s: final %v, periodic %v; want %v", k, final[k], periodic[k], want)
		}
	}
	for _, k := range []string{"malformed", "lost", "enobufs", "failopen_passed", "shape_overflow", "held", "rule.a.shadow_dropped", "rule.b.marked", "rule.rest.dropped"} {
		if v, ok := final[k]; !ok || v != uint64(0) {
			t.Errorf("final %s = %v, want 0", k, v)
		}
		if v, ok := periodic[k]; ok {
			t.Errorf("periodic line carries %s=%v: only what moved", k, v)
		}
	}
	if final["failopen_exact"] != false || final["failopen_secs"] != "0.000" || final["secs"] != "1.000" || final["per_queue"] != "3:6,4:6" {
		t.Errorf("final line: %v", final)
	}
	// Grouped by scope: the keys of one scope together, in scope order.
	var keys []string
	for _, a := range d.statsAttrs(time.Second, true) {
		if k, ok := a.(string); ok {
			keys = append(keys, k)
		}
	}
	last := scope(0)
	for _, k := range keys {
		i := slices.IndexFunc(counters, func(c counter) bool { return c.Key == k && c.from != fromRule && c.from != fromGlobalRule })
		if i < 0 {
			continue // secs, per_queue, and values
		}
		if s := counters[i].Scope; s < last {
			t.Errorf("stats line %v: %s (%s) after a key of scope %s", keys, k, s, last)
		} else {
			last = s
		}
	}
}

// TestShapeHistograms: the shaping delays and the release lateness are
// histograms (they add up over queues and hosts), not lifetime summaries.
func TestShapeHistograms(t *testing.T) {
	d, fqs := testState(t)
	fqs[1].late = nfq.LatencyHistogram{Count: 4, Sum: 3 * time.Millisecond, Cumulative: make([]uint64, len(latencyBounds))}
	for i, b := range latencyBounds {
		switch {
		case b >= time.Millisecond:
			fqs[1].late.Cumulative[i] = 4
		case b >= 50*time.Microsecond:
			fqs[1].late.Cumulative[i] = 2
		}
	}
	c := newCollector(d)
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	want := wantHistograms("packetshaper_release_late_seconds", "How late held packets got their verdicts after their departure time.",
		latencyBounds, map[string]nfq.LatencyHistogram{"3": {Cumulative: make([]uint64, len(latencyBounds))}, "4": fqs[1].late})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "packetshaper_release_late_seconds"); err != nil {
		t.Error(err)
	}
	// The engine's delays: one histogram, with delayBounds, labelled
	// with the queues it serves.
	none := nfq.LatencyHistogram{Cumulative: make([]uint64, len(delayBounds))}
	want = wantHistograms("packetshaper_shape_delay_seconds", "Delays shaping rules gave packets (from arrival to departure time).",
		delayBounds, map[string]nfq.LatencyHistogram{"3-4": none})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "packetshaper_shape_delay_seconds"); err != nil {
		t.Error(err)
	}
}

// TestStatusRuleColumns: status's rule table shows the counters with a
// column, among them SHADOW (shadow-dropped) and MARKED, read from the
// rules' status.
func TestStatusRuleColumns(t *testing.T) {
	var heads []string
	r := control.Rule{Packets: 1, Accepted: 2, Dropped: 3, ShadowDropped: 4, Marked: 5, Flows: 6, Evictions: 7}
	var vals []uint64
	for _, c := range StatusRuleColumns() {
		heads = append(heads, c.Header)
		vals = append(vals, c.Get(&r))
	}
	if got, want := fmt.Sprint(heads, vals), "[PACKETS ACCEPTED DROPPED SHADOW MARKED FLOWS EVICTIONS] [1 2 3 4 5 6 7]"; got != want {
		t.Errorf("columns %s, want %s", got, want)
	}
}
