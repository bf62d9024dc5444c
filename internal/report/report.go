// Package report writes a replay as one self-contained HTML page: offered,
// accepted and dropped packets per second over the capture's time, in
// total and per rule (with shadow drops and marks), the unmatched,
// malformed and non-IP traffic, the flows with the most drops and the
// settings of the replay. The charts are inline SVG drawn here, with
// tooltips in SVG <title> elements; the page runs no script and fetches
// nothing, so it can be mailed, archived and opened from disk.
//
// The page holds no wall-clock time: the same replay gives the same
// bytes.
package report

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
	"github.com/packetshaper/packetshaper/shaper"
)

// Input is what the page shows beside the Replayer's counts: how the
// replay was run.
type Input struct {
	// Args are the replay command's arguments (shown as the command
	// line).
	Args []string
	// Policy is the policy replayed, shown as `packetshaper check` prints
	// it, whole and per rule; nil shows the engine's rules only.
	// PolicySource names where it came from (a file, the flags).
	Policy       *policy.File
	PolicySource string
	// Files are the captures, in replay order.
	Files []File
	// Queue is the NFQUEUE number rules with a queue match saw;
	// Malformed the verdict for malformed packets.
	Queue     uint16
	Malformed shaper.Verdict
	// Top is how many flows the flow table lists (0: 10).
	Top int
	// Err, if not empty, is the error that ended the replay early: the
	// page reports what was replayed before it.
	Err string
}

// File is one capture replayed.
type File struct {
	Name string
	Size int64 // bytes; negative if unknown (standard input)
}

// Write writes the page for what r replayed. r must have been made with
// Options.Timeline.
func Write(w io.Writer, r *replay.Replayer, in Input) error {
	tl := r.Timeline()
	if tl == nil {
		return errors.New("report: the replay kept no timeline (replay.Options.Timeline)")
	}
	p := build(r, tl, in)
	var buf bytes.Buffer
	if err := page.Execute(&buf, p); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// The page's model: everything formatted, so the template only lays out.

type pageData struct {
	Title      string
	Command    string
	Source     string
	Policy     string
	Files      []fileRow
	First      string
	Last       string
	Span       string
	Width      string
	Buckets    int
	MinWidth   string
	MaxBuckets int
	Queue      uint16
	Malform    string
	Err        string
	Totals     []kv
	Total      *chart
	Other      *chart
	Rules      []ruleSection
	TotalRows  []totalRow
	Flows      []flowRow
	Top        int
	NoFlows    bool
	AnyDrops   bool
}

type kv struct {
	K, V string
}

type fileRow struct {
	Name, Size string
}

type ruleSection struct {
	Index    int
	Name     string
	Anchor   string
	Does     string
	Snippet  string
	Chart    *chart
	Counts   []kv
	Packets  uint64
	Accepted uint64
	Dropped  uint64
	Shadow   uint64
	Marked   uint64
	DropPct  string
	Flows    uint64
	Evicted  uint64
	Expired  uint64
	PeakOff  string
	PeakOver string
}

// totalRow is a total ([[total]], a rule's own): Dropped are the packets
// over it.
type totalRow struct {
	Name                       string
	Packets, Accepted, Dropped uint64
	DropPct                    string
}

// flowRow is a flow of the top flows: the packets over a shadow rule's
// limit are in Shadow (accepted), over a marking rule's in Marked, never in
// Dropped.
type flowRow struct {
	Rank                       int
	Rule, RuleAnchor, Flow     string
	Packets, Accepted, Dropped uint64
	Shadow, Marked             uint64
	DropPct                    string
}

func build(r *replay.Replayer, tl *replay.Timeline, in Input) *pageData {
	s := r.Summary()
	rules := r.Rules()
	n := len(rules)
	p := &pageData{
		Title:      "packetshaper replay report",
		Command:    commandLine(in.Args),
		Source:     in.PolicySource,
		Width:      fmtDuration(tl.Width()),
		Buckets:    tl.Len(),
		MinWidth:   fmtDuration(replay.TimelineMinWidth),
		MaxBuckets: replay.TimelineMaxBuckets,
		Queue:      in.Queue,
		Malform:    strings.ToLower(in.Malformed.String()),
		Err:        in.Err,
		Top:        in.Top,
	}
	if p.Top <= 0 {
		p.Top = 10
	}
	if len(in.Files) == 1 {
		p.Title += ": " + filepath.Base(in.Files[0].Name)
	}
	for _, f := range in.Files {
		size := "unknown"
		if f.Size >= 0 {
			size = fmtBytes(f.Size)
		}
		p.Files = append(p.Files, fileRow{f.Name, size})
	}
	if s.Packets > 0 {
		p.First, p.Last = fmtTime(s.First), fmtTime(s.Last)
		p.Span = fmtDuration(s.Duration())
	}
	if in.Policy != nil {
		var b strings.Builder
		in.Policy.Format(&b)
		p.Policy = b.String()
	}
	p.Totals = []kv{
		{countname.Packets, num(s.Packets)},
		{countname.Accepted, num(s.Accepted)},
		{countname.Dropped, num(s.Dropped) + pctOf(s.Dropped, s.Packets)},
		{countname.Malformed, num(s.Malformed)},
		{countname.NoPorts, num(s.NoPorts)},
		{countname.Unmatched, num(s.Unmatched)},
		{countname.NonIP, num(s.NonIP)},
		{"flows at the end", num(s.Flows)},
		{"flows seen", num(s.FlowsSeen)},
		{"evicted", num(s.Evictions)},
		{countname.Expired, num(s.Expired)},
	}
	if ct := r.Conntrack(); ct != nil {
		// ct-state matches: what replay's tracker gave, and where the
		// capture may make it differ from the kernel's.
		p.Totals = append(p.Totals,
			kv{"conntrack new / established / related / invalid", num(ct.New) + " / " + num(ct.Established) + " / " + num(ct.Related) + " / " + num(ct.Invalid)},
			kv{"conntrack: TCP packets of connections the capture does not open (established here, the first new in the kernel)", num(ct.PickedUp)},
			kv{"conntrack: conversations seen one way only (every packet new: an asymmetric capture?)", num(ct.OneWay)},
			kv{"conntrack: entries evicted from a full table", num(ct.Evicted)})
	}

	all := make([]int, tl.Rows())
	for i := range all {
		all[i] = i
	}
	p.Total = newChart("totals", "All traffic", tl, 960, 280)
	p.Total.stacked(tl, all, countname.Dropped, replay.Dropped)
	p.Total.line(tl, all, "offered", replay.Offered, "offered")
	p.Total.line(tl, all, "shadow-dropped", replay.ShadowDropped, "shadow")
	p.Total.line(tl, all, countname.Marked, replay.Marked, countname.Marked)
	p.Total.finish(tl)

	p.Other = newChart("other", "Traffic no rule limits", tl, 960, 200)
	p.Other.line(tl, []int{n + replay.RowUnmatched}, countname.Unmatched, replay.Offered, countname.Unmatched)
	p.Other.line(tl, []int{n + replay.RowMalformed}, countname.Malformed, replay.Offered, countname.Malformed)
	p.Other.line(tl, []int{n + replay.RowNonIP}, "non-IP", replay.Offered, "nonip")
	p.Other.finish(tl)

	for i, ru := range rules {
		er := r.Rule(i)
		sec := ruleSection{
			Index: i + 1, Name: ru.Name, Anchor: "rule-" + ru.Name,
			Packets: ru.Packets, Accepted: ru.Accepted, Dropped: ru.Dropped,
			Shadow: ru.ShadowDropped, Marked: ru.Marked, DropPct: pct(ru.Dropped, ru.Packets),
			Flows: ru.Flows, Evicted: ru.Evictions, Expired: ru.Expired,
		}
		var pr *policy.Rule
		if in.Policy != nil && i < len(in.Policy.Rules) && in.Policy.Rules[i].Name == ru.Name {
			pr = &in.Policy.Rules[i]
			sec.Snippet = ruleSnippet(*pr)
		}
		sec.Does = describe(er, pr)
		c := newChart("rule:"+ru.Name, ru.Name, tl, 470, 190)
		row := []int{i}
		over, kind, class := countname.Dropped, replay.Dropped, ""
		switch {
		case er.Action == shaper.ActionLimit && er.Shadow:
			over, kind, class = "shadow-dropped", replay.ShadowDropped, "shadow"
		case er.Action == shaper.ActionLimit && er.MarkExceeded:
			over, kind, class = countname.Marked, replay.Marked, countname.Marked
		}
		if class == "" {
			c.stacked(tl, row, countname.Dropped, replay.Dropped)
		} else {
			c.stacked(tl, row, "", 0)
			c.line(tl, row, over, kind, class)
		}
		c.line(tl, row, "offered", replay.Offered, "offered")
		c.finish(tl)
		sec.Chart = c
		sec.PeakOff = rate(c.peak(tl, row, replay.Offered))
		sec.PeakOver = rate(c.peak(tl, row, kind))
		sec.Counts = []kv{
			{countname.Packets, num(ru.Packets)},
			{countname.Accepted, num(ru.Accepted)},
			{countname.Dropped, num(ru.Dropped) + pctOf(ru.Dropped, ru.Packets)},
			{"shadow-dropped", num(ru.ShadowDropped)},
			{countname.Marked, num(ru.Marked)},
			{"peak offered", sec.PeakOff + "/s"},
			{"peak " + over, sec.PeakOver + "/s"},
			{countname.Flows, fmt.Sprintf("%d at the end, %d evicted, %d expired", ru.Flows, ru.Evictions, ru.Expired)},
		}
		p.Rules = append(p.Rules, sec)
	}
	for _, t := range r.Totals() {
		p.TotalRows = append(p.TotalRows, totalRow{Name: t.Name, Packets: t.Packets, Accepted: t.Accepted, Dropped: t.Dropped, DropPct: pct(t.Dropped, t.Packets)})
	}

	fl := r.Flows(p.Top)
	p.NoFlows = len(fl) == 0
	for i, f := range fl {
		p.AnyDrops = p.AnyDrops || f.Dropped > 0
		p.Flows = append(p.Flows, flowRow{
			Rank: i + 1, Rule: rules[f.Rule].Name, RuleAnchor: "rule-" + rules[f.Rule].Name, Flow: f.Flow,
			Packets: f.Packets, Accepted: f.Accepted, Dropped: f.Dropped, Shadow: f.ShadowDropped, Marked: f.Marked,
			DropPct: pct(f.Dropped, f.Packets),
		})
	}
	return p
}

// describe says in words what rule er does.
func describe(er shaper.Rule, pr *policy.Rule) string {
	switch er.Action {
	case shaper.ActionAccept:
		return "accept: never limited"
	case shaper.ActionDrop:
		return "drop: every packet dropped"
	}
	lim := er.Limit
	lc := lim.LimiterConfig()
	var b strings.Builder
	b.WriteString("limit: ")
	switch {
	case pr != nil && pr.WithDefaults().Bitrate != "":
		b.WriteString(pr.WithDefaults().Bitrate)
	case lim.Bytes:
		fmt.Fprintf(&b, "%s bits/s", fmtFloat(lim.Rate*8))
	default:
		fmt.Fprintf(&b, "%s packets/s", fmtFloat(lim.Rate))
	}
	fmt.Fprintf(&b, " per flow, key %s, %s", keyName(lim), lc.Algorithm)
	if lc.Algorithm == shaper.TokenBucket {
		fmt.Fprintf(&b, ", burst %s", fmtFloat(lc.Burst))
	} else {
		fmt.Fprintf(&b, ", window %s", fmtDuration(time.Duration(lc.Window)))
	}
	switch {
	case er.Shadow:
		b.WriteString("; shadow: over-limit packets are accepted and counted as shadow-dropped")
	case er.MarkExceeded:
		fmt.Fprintf(&b, "; over-limit packets are accepted with mark %#x/%#x", er.Mark, er.MarkMask)
	case lim.Shape:
		fmt.Fprintf(&b, "; shapes: over-limit packets wait, up to max-delay %s, and are dropped only beyond it", fmtDuration(time.Duration(lim.MaxDelay)))
	default:
		b.WriteString("; polices: over-limit packets are dropped")
	}
	return b.String()
}

// keyName says how a rule keys its flows, in the rule file's terms:
// "5tuple", "src (src-prefix4 24)".
func keyName(c shaper.Config) string {
	k := c.Key
	s := k.Mode.String()
	var pre []string
	for _, ks := range policy.KeySettings(&k) {
		pre = append(pre, strings.TrimSpace(ks.Field+" "+ks.Value))
	}
	if len(pre) > 0 {
		s += " (" + strings.Join(pre, ", ") + ")"
	}
	return s
}

// ruleSnippet is rule r as `packetshaper check` prints it.
func ruleSnippet(r policy.Rule) string {
	var b strings.Builder
	(&policy.File{Rules: []policy.Rule{r}}).Format(&b)
	s := b.String()
	if i := strings.Index(s, "[[rule]]"); i >= 0 {
		s = s[i:]
	}
	return strings.TrimRight(s, "\n")
}

// commandLine quotes args as a shell would need them.
func commandLine(args []string) string {
	parts := []string{"packetshaper", "replay"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num": num,
}).Parse(pageTemplate))
