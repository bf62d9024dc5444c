package daemon

import (
	"fmt"
	"strings"
)

// metricsReference is docs/metrics-reference.md, made from the counters,
// the distributions and the daemon's families (TestMetricsReference checks
// the file is current; `go generate ./internal/daemon` rewrites it).
func metricsReference() string {
	var b strings.Builder
	b.WriteString(`<!-- Generated from internal/daemon/counters.go by "go generate ./internal/daemon": do not edit. -->
# Metrics reference

Every counter packetshaper keeps, as the Prometheus endpoint
(` + "`--metrics-addr`" + `) and the ` + "`stats`" + ` log line name it. Each comes from one
entry of the table in ` + "`internal/daemon/counters.go`" + `; see [Logs and metrics](metrics.md)
for how to read them.

Labels: ` + "`queue`" + ` is the NFQUEUE number; for the engine's series (scope
engine, shaping from the engine, and the rules') it is the queues the one
engine serves, e.g. ` + "`20-23`" + `. ` + "`rule`" + ` is a rule's name. ` + "`path`" + ` is where the
rule runs: ` + "`queue`" + ` (NFQUEUE, the Go engine) or ` + "`kernel`" + ` (the eBPF fast path,
` + "`--fastpath`" + `: its counters, flows and evictions read from the program's maps; an
LRU map reports no evictions, so a kernel rule's are an upper bound, the flows
it inserted less those present; its flows are counted every second, or every
ten times the count's time: about 4.5 s for a map of a million flows). In the stats line a
rule's counters are ` + "`rule.NAME.KEY`" + `, and a kernel rule's group has ` + "`rule.NAME.path=kernel`" + `. A periodic stats line carries only the
counters that are not 0, grouped by scope in this order; the ` + "`final stats`" + ` line
carries them all.

## Counters and gauges

| family | type | labels | scope | stats line | what |
|---|---|---|---|---|---|
`)
	cell := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	key := func(c *counter) string {
		if c.Key == "" {
			return ""
		}
		switch c.Scope {
		case scopeRule:
			return cell("rule.NAME." + c.Key)
		case scopeTotal:
			return cell("total.NAME." + c.Key)
		}
		return cell(c.Key)
	}
	labels := func(ls []string) string { return strings.Join(ls, ", ") }
	for _, i := range lineOrder {
		c := &counters[i]
		if c.Metric == "" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(c.Metric), c.Kind, labels(fromLabels[c.from]), c.Scope, key(c), c.Help)
	}
	for _, d := range distributions {
		fmt.Fprintf(&b, "| %s | histogram | %s | %s | | %s |\n", cell(d.Metric), labels(fromLabels[d.from]), d.Scope, d.Help)
	}
	for _, f := range daemonFamilies {
		fmt.Fprintf(&b, "| %s | %s | %s | daemon | | %s |\n", cell(f.Metric), f.Kind, labels(f.labels), f.Help)
	}
	b.WriteString("| `go_*`, `process_*` | | | | | The Go runtime's and the process's standard collectors. |\n")
	b.WriteString(`
## Only in the stats line

| key | scope | what |
|---|---|---|
`)
	for _, i := range lineOrder {
		if c := &counters[i]; c.Metric == "" && c.Key != "" {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", key(c), c.Scope, c.Help)
		}
	}
	b.WriteString("| `secs` | | Seconds since start. |\n| `per_queue` | queue | Packets decided per queue (`Q:N,...`), with several queues. |\n")
	b.WriteString("| `rule.NAME.path` | rule | `kernel` for a rule the fast path runs (absent for the queue's). |\n")
	return b.String()
}
