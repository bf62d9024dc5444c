package daemon

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
)

// The stats line: one function over the counters (counters.go), grouped by
// scope (queue, engine, fail-open, offload, shaping, latency, global, then
// one group per rule: rule.NAME.packets=… in text, nested in JSON).

// logStats logs the stats line. A periodic line (all false) carries only
// what moved: the counters that are not 0; the final line (all) carries
// every counter.
func (d *state) logStats(log *slog.Logger, msg string, elapsed time.Duration, all bool) {
	log.Info(msg, d.statsAttrs(elapsed, all)...)
}

// lineOrder is the order of counters in the stats line: by scope, then as
// declared.
var lineOrder = func() []int {
	o := make([]int, len(counters))
	for i := range o {
		o[i] = i
	}
	slices.SortStableFunc(o, func(a, b int) int { return int(counters[a].Scope) - int(counters[b].Scope) })
	return o
}()

// statsAttrs are the stats line's attributes: every counter with a Key,
// merged over the queues, with all, or only those not 0; then the seconds,
// the packets per queue, each rule's counters and each total's.
func (d *state) statsAttrs(elapsed time.Duration, all bool) []any {
	sc := d.scrape()
	attrs := d.totalAttrs(sc, all)
	attrs = append(attrs, "secs", fmt.Sprintf("%.3f", elapsed.Seconds()))
	if len(sc.queues) > 1 {
		var b strings.Builder
		for i := range sc.queues {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s:%d", sc.qlabels[i], sc.queues[i].Packets)
		}
		attrs = append(attrs, "per_queue", b.String())
	}
	if rules := ruleAttrs(sc, all); len(rules) > 0 {
		attrs = append(attrs, slog.Group("rule", rules...))
	}
	if totals := totalGroups(sc, all); len(totals) > 0 {
		attrs = append(attrs, slog.Group("total", totals...))
	}
	return attrs
}

// totalGroups are the totals' groups, by name, in the policy's order.
func totalGroups(sc *scrape, all bool) []any {
	var groups []any
	sc.each(fromTotal, func(x *src, labels ...string) {
		var fields []any
		for i := range counters {
			if c := &counters[i]; c.Key != "" && c.from == fromTotal {
				fields = addAttr(fields, c, c.get(x), all)
			}
		}
		if len(fields) > 0 {
			groups = append(groups, slog.Group(labels[1], fields...))
		}
	})
	return groups
}

// addAttr appends c's key and value v to attrs, unless v is 0 and the line
// leaves it out (not all, or c omits its zero).
func addAttr(attrs []any, c *counter, v float64, all bool) []any {
	if v == 0 && (!all || c.omitZero) {
		return attrs
	}
	return append(attrs, c.Key, c.fmtValue(v))
}

// totalAttrs are the counters of the whole daemon, in the line's order:
// each merged over its sources (summed, the largest, or the total's).
func (d *state) totalAttrs(sc *scrape, all bool) []any {
	tot := d.totalSample(sc)
	var attrs []any
	for _, i := range lineOrder {
		c := &counters[i]
		if c.Key == "" || c.from == fromRule || c.from == fromGlobalRule || c.from == fromTotal || (c.Scope == scopeLatency && !d.cfg.Queue.Latency) {
			continue
		}
		var v float64
		seen := false
		if c.merge == mTotal {
			v, seen = c.get(&src{q: &tot}), true
		} else {
			sc.each(c.from, func(x *src, _ ...string) {
				if y := c.get(x); c.merge == mMax {
					v = max(v, y)
				} else {
					v += y
				}
				seen = true
			})
		}
		if seen {
			attrs = addAttr(attrs, c, v, all)
		}
	}
	return attrs
}

// ruleAttrs are the rules' groups, by name, in the policy's order: each
// rule's counters (with a global rule's), and its path if the kernel runs
// it.
func ruleAttrs(sc *scrape, all bool) []any {
	var rules []any
	sc.each(fromRule, func(x *src, labels ...string) {
		n := labels[1]
		g, global := sc.global[n]
		var fields []any
		for i := range counters {
			c := &counters[i]
			if c.Key == "" || c.globalOnly && !global {
				continue
			}
			switch {
			case c.from == fromRule:
				fields = addAttr(fields, c, c.get(x), all)
			case c.from == fromGlobalRule && global:
				fields = addAttr(fields, c, c.get(&src{g: &g}), all)
			}
		}
		if len(fields) > 0 {
			if labels[2] == pathKernel {
				fields = append([]any{"path", pathKernel}, fields...)
			}
			rules = append(rules, slog.Group(n, fields...))
		}
	})
	return rules
}

// totalSample is the queues' counters that do not add up: fail-open over
// all the queues (the time any was full; with fail-open, what the kernel
// could not deliver to a full socket, lost, is passed too), and the worst
// queue's latency and lateness quantiles.
func (d *state) totalSample(sc *scrape) queueSample {
	var t queueSample
	if d.mon != nil {
		t.failOpen = d.mon.Total()
	}
	for i := range sc.queues {
		q := &sc.queues[i]
		if !failClosed(d.sh.ws) {
			t.failOpen.Passed += q.Lost
		}
		worst(&t.latency, q.latency)
		worst(&t.hold.Late, q.hold.Late)
	}
	return t
}

// worst keeps in t the quantiles of the worse of t and l, and their count.
func worst(t *nfq.LatencyStats, l nfq.LatencyStats) {
	c := t.Count + l.Count
	if l.P99 > t.P99 || l.Max > t.Max {
		*t = l
	}
	t.Count = c
}

// failClosed reports whether the queues drop what does not fit.
func failClosed(ws []*worker) bool { return len(ws) > 0 && ws[0].failClosed }
