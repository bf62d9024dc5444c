package top

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/packetshaper/packetshaper/internal/control"
)

// DescribeLimit is a rule's limiter in a few characters, for a table
// column: "100 pkt/s tb b5", "2 Mbit/s shape", "10 pkt/s fw 1s", "accept".
// "shape" is a token bucket that shapes (holds what exceeds the rate),
// "tb" one that polices (drops it). (packetshaper status has the long
// form.)
func DescribeLimit(r *control.Rule) string {
	if r.Action != "limit" {
		return r.Action
	}
	var s string
	if r.Unit == "bytes" {
		s = control.SIBits(r.Rate*8) + "bit/s"
	} else {
		s = fmt.Sprintf("%g pkt/s", r.Rate)
	}
	algo := map[string]string{"token-bucket": "tb", "fixed-window": "fw", "sliding-window": "sw", "sliding-window-counter": "swc"}[r.Algorithm]
	if algo == "" {
		algo = r.Algorithm
	}
	if r.Shape {
		algo = "shape"
	}
	s += " " + algo
	if r.Burst > 0 && r.Unit != "bytes" {
		s += fmt.Sprintf(" b%g", r.Burst)
	} else if r.WindowSecs > 0 {
		s += " " + (time.Duration(r.WindowSecs * 1e9)).String()
	}
	if r.Shadow {
		s += " shadow"
	}
	if r.MarkExceeded {
		s += " mark"
	}
	return s
}

// Line is one line of a frame.
type Line struct {
	Text string
	// Head marks a table's heading (the terminal shows it in reverse
	// video).
	Head bool
}

// Layout is the frame's size: Width columns (0: no limit) and Height
// lines (0: no limit, every rule and FlowRows flows).
type Layout struct {
	Width, Height int
}

// headerLines and the blank lines between the parts.
const headerLines = 3

// FlowRows is the number of flow rows a frame of the layout has room for,
// given the number of rules (the rules table takes what it needs, up to
// half of what is left).
func (l Layout) FlowRows(nrules int) int {
	if l.Height <= 0 {
		return 0
	}
	_, flows := l.split(nrules)
	return flows
}

// split divides the lines below the header between the rules' rows and the
// flows' rows.
func (l Layout) split(nrules int) (rules, flows int) {
	// header, blank, rules heading, rules, blank, flows heading, flows
	left := l.Height - headerLines - 4
	if left < 0 {
		return 0, 0
	}
	rules = min(nrules, max(1, left/2))
	return rules, max(0, left-rules)
}

// Render lays v out as lines of text, at most l.Height lines of at most
// l.Width characters.
func Render(v *View, l Layout, status string) []Line {
	h := &v.Header
	var out []Line
	add := func(head bool, format string, a ...any) {
		out = append(out, Line{Text: fmt.Sprintf(format, a...), Head: head})
	}
	queues := make([]string, len(h.Queues))
	for i, q := range h.Queues {
		queues[i] = fmt.Sprint(q)
	}
	add(false, "packetshaper %s pid %d, up %s; queues %s (%d bound), %s; %d flows; policy %s",
		h.Version, h.PID, fmtUptime(h.Uptime), strings.Join(queues, ","), h.Bound, h.Mode, h.Listed, h.Policy)
	fo := ""
	if h.FailOpenActive {
		fo = " QUEUE FULL NOW"
	}
	if v.Rated {
		add(false, "in %s pkt/s  accepted %s/s  dropped %s/s  fail-open %s/s (%d since start)%s",
			fmtRate(h.In), fmtRate(h.Accepted), fmtRate(h.Dropped), fmtRate(h.FailOpen), h.FailOpenTotal, fo)
	} else {
		add(false, "in - pkt/s  accepted -/s  dropped -/s  fail-open -/s (%d since start)%s  (rates after the next refresh)", h.FailOpenTotal, fo)
	}
	if status == "" {
		status = "q quit  s sort"
	}
	add(false, "flows by %s, rates over %.1fs  [%s]", v.Sort, v.Interval, status)

	nrules, nflows := len(v.Rules), len(v.Flows)
	if l.Height > 0 {
		nrules, nflows = l.split(len(v.Rules))
		nflows = min(nflows, len(v.Flows))
	}
	out = append(out, Line{})
	// Rules.
	rt := table{cols: []col{{"RULE", true, 4, 24}, {"LIMIT", true, 5, 28}, {"PKT/S", false, 8, 0}, {"ACC/S", false, 8, 0},
		{"DROP/S", false, 8, 0}, {"SHADOW/S", false, 8, 0}, {"MARK/S", false, 8, 0}, {"FLOWS", false, 7, 0}}}
	for _, r := range v.Rules[:nrules] {
		rt.rows = append(rt.rows, []string{r.Name, r.Limit, fmtRate(r.Rates.Packets), fmtRate(r.Rates.Accepted),
			fmtRate(r.Rates.Dropped), fmtRate(r.Rates.Shadow), fmtRate(r.Rates.Marked), fmtCount(r.Flows)})
	}
	if more := len(v.Rules) - nrules; more > 0 && nrules > 0 {
		rt.rows[nrules-1] = []string{fmt.Sprintf("(%d more)", more+1)}
	}
	out = append(out, rt.lines(l.Width)...)
	out = append(out, Line{})
	// Flows.
	ft := table{cols: []col{{"Q", false, 2, 0}, {"RULE", true, 4, 16}, {"KEY", true, 3, 0}, {"PKT/S", false, 8, 0},
		{"ACC/S", false, 8, 0}, {"DROP/S", false, 8, 0}, {"PACKETS", false, 8, 0}, {"DROPPED", false, 8, 0}}}
	for _, f := range v.Flows[:nflows] {
		p, a, d := "-", "-", "-"
		if f.Known {
			p, a, d = fmtRate(f.Rates.Packets), fmtRate(f.Rates.Accepted), fmtRate(f.Rates.Dropped)
		}
		ft.rows = append(ft.rows, []string{fmt.Sprint(f.Queue), f.Rule, f.Key, p, a, d, fmtCount(f.Packets), fmtCount(f.Dropped)})
	}
	out = append(out, ft.lines(l.Width)...)
	if l.Height > 0 && len(out) > l.Height {
		out = out[:l.Height]
	}
	for i := range out {
		out[i].Text = clip(out[i].Text, l.Width)
	}
	return out
}

// col is a table column: a left-aligned text column takes its widest cell
// between min and max (max 0: any), a right-aligned one at least min.
type col struct {
	head     string
	left     bool
	min, max int
}

type table struct {
	cols []col
	rows [][]string
}

// lines formats the table within width (0: any): the text columns shrink,
// the KEY-like column (no max) last, their cells clipped with "…".
func (t *table) lines(width int) []Line {
	w := make([]int, len(t.cols))
	for i, c := range t.cols {
		w[i] = max(c.min, utf8.RuneCountInString(c.head))
		for _, r := range t.rows {
			if i < len(r) && (c.left || len(r) == len(t.cols)) {
				w[i] = max(w[i], utf8.RuneCountInString(r[i]))
			}
		}
		if c.max > 0 {
			w[i] = min(w[i], c.max)
		}
	}
	if width > 0 {
		total := len(w) - 1
		for _, x := range w {
			total += x
		}
		// Shrink the unbounded text column first, then the others.
		for pass := 0; pass < 2 && total > width; pass++ {
			for i, c := range t.cols {
				if !c.left || (pass == 0) != (c.max == 0) {
					continue
				}
				cut := min(total-width, w[i]-c.min)
				w[i] -= cut
				total -= cut
			}
		}
	}
	row := func(cells []string) string {
		var b strings.Builder
		for i, c := range t.cols {
			if i > 0 {
				b.WriteByte(' ')
			}
			s := ""
			if i < len(cells) {
				s = cells[i]
			}
			if len(cells) == 1 && i == 0 {
				b.WriteString(s) // a note across the row
				break
			}
			s = clip(s, w[i])
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(s))
			if c.left {
				b.WriteString(s + pad)
			} else {
				b.WriteString(pad + s)
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	heads := make([]string, len(t.cols))
	for i, c := range t.cols {
		heads[i] = c.head
	}
	out := []Line{{Text: row(heads), Head: true}}
	for _, r := range t.rows {
		out = append(out, Line{Text: row(r)})
	}
	return out
}

// clip cuts s to n characters (n ≤ 0: no limit), the last one "…".
func clip(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// fmtRate writes a rate in at most 7 characters: "0", "12.5", "1234",
// "12.3k", "4.56M".
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	case v < 10000:
		return fmt.Sprintf("%.0f", v)
	case v < 1e7:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.2fM", v/1e6)
}

// fmtCount writes a count in at most 8 characters.
func fmtCount(n uint64) string {
	switch {
	case n < 10_000_000:
		return fmt.Sprint(n)
	case n < 10_000_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fG", float64(n)/1e9)
}

// fmtUptime writes seconds as "42s", "3m04s", "5h02m", "2d03h".
func fmtUptime(s float64) string {
	d := time.Duration(s) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(s))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
