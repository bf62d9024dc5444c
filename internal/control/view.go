package control

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// The text views of the control protocol's answers: `packetshaper
// status`'s tables and `packetshaper flows`'s listing (the JSON views are
// the protocol's own encoding).

// FlowOrder is the order of a listing sorted by sort (SortDrops or
// SortPackets): most dropped first then most packets, or most packets
// first then most dropped; ties by queue, rule and key. The server's
// --top and the client's whole listing sort alike.
func FlowOrder(sort string) func(a, b *Flow) int {
	if sort == SortPackets {
		return func(a, b *Flow) int {
			return cmp.Or(cmp.Compare(b.Packets, a.Packets), cmp.Compare(b.Dropped, a.Dropped), tie(a, b))
		}
	}
	return func(a, b *Flow) int {
		return cmp.Or(cmp.Compare(b.Dropped, a.Dropped), cmp.Compare(b.Packets, a.Packets), tie(a, b))
	}
}

// FlowWriter writes flows as `packetshaper flows` prints them: one JSON
// object a line (Flow.AppendJSON), or a FlowTable; buffered: call Flush.
type FlowWriter struct {
	out   *bufio.Writer
	table *FlowTable // nil for JSON
	line  []byte
}

// NewFlowWriter is a FlowWriter to w, of JSON lines if asJSON.
func NewFlowWriter(w io.Writer, asJSON bool) *FlowWriter {
	fw := &FlowWriter{out: bufio.NewWriterSize(w, 64<<10)}
	if !asJSON {
		fw.table = NewFlowTable(fw.out)
	}
	return fw
}

// Write writes one flow.
func (fw *FlowWriter) Write(f *Flow) error {
	if fw.table != nil {
		return fw.table.Write(f)
	}
	fw.line = append(f.AppendJSON(fw.line[:0]), '\n')
	_, err := fw.out.Write(fw.line)
	return err
}

// Flush writes what is buffered, the table's header even if no flow was
// written.
func (fw *FlowWriter) Flush() error {
	if fw.table != nil {
		fw.table.Flush()
	}
	return fw.out.Flush()
}

// Partial writes the flows written, after an error: a table's header only
// if a flow was.
func (fw *FlowWriter) Partial() {
	if fw.table != nil {
		fw.table.Partial()
	}
	fw.out.Flush()
}

// FlowTable writes flows as `packetshaper flows` prints them: a table
// under a header, the header with the first flow or, for none, at Flush
// (not before an error). Not safe for concurrent use.
type FlowTable struct {
	tw     *tabwriter.Writer
	header func()
}

// NewFlowTable is a FlowTable writing to w (buffered: call Flush).
func NewFlowTable(w io.Writer) *FlowTable {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	return &FlowTable{tw: tw, header: sync.OnceFunc(func() {
		fmt.Fprintln(tw, "QUEUE\tRULE\tKEY\tPACKETS\tACCEPTED\tDROPPED\tSHADOW_DROPPED\tMARKED\tLEFT\tIDLE\tPATH")
	})}
}

// Write writes one flow's line.
func (t *FlowTable) Write(f *Flow) error {
	t.header()
	idle := fmtSecs(f.IdleSecs)
	if f.Expired {
		idle += " (expired)"
	}
	_, err := fmt.Fprintf(t.tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", f.Queue, f.Rule, f.Key, f.Packets, f.Accepted, f.Dropped, f.ShadowDropped, f.Marked, fmtLeft(f.Left, f.Unit), idle, pathOf(f.Path))
	return err
}

// Flush writes the header if no flow was written, and the table's lines.
func (t *FlowTable) Flush() error {
	t.header()
	return t.tw.Flush()
}

// Partial writes the lines of the flows written, without a header if none
// was (after an error).
func (t *FlowTable) Partial() error { return t.tw.Flush() }

// RuleColumn is a counter column of the status's rule table: its header
// and how to read it of a rule (the daemon's counters table gives them,
// daemon.StatusRuleColumns).
type RuleColumn struct {
	Header string
	Get    func(*Rule) uint64
}

// WriteStatus writes st as `packetshaper status` prints it: the process,
// the policy and its reloads, the fast path's links, the queues' table
// and the rules' table, whose counter columns are cols.
func WriteStatus(w io.Writer, st *Status, cols []RuleColumn) {
	offload := "off"
	if st.Offload {
		offload = "on"
	}
	fmt.Fprintf(w, "packetshaper %s, pid %d, up %s (since %s)\n", st.Version, st.PID, fmtSecs(st.UptimeSecs), st.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "policy: %s; %s; offload %s\n", st.Policy, st.Mode, offload)
	r := st.Reloads
	switch l := r.Last; {
	case l == nil:
		fmt.Fprintf(w, "reloads: none\n")
	case l.OK:
		fmt.Fprintf(w, "reloads: %d ok, %d failed; last at %s, ok, kept state: %s\n", r.OK, r.Failed, l.Time.Format(time.RFC3339), orNone(strings.Join(l.KeptState, ",")))
	default:
		fmt.Fprintf(w, "reloads: %d ok, %d failed; last at %s failed: %s\n", r.OK, r.Failed, l.Time.Format(time.RFC3339), l.Error)
	}
	for _, f := range st.Fastpath {
		at := ""
		if f.Attach != "" {
			at = fmt.Sprintf(" (%s, ifindex %d)", f.Attach, f.Ifindex)
		}
		fmt.Fprintf(w, "fast path at %s: %s%s; attached again %d times\n", f.Interface, f.State, at, f.Reattached)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tBOUND\tQUEUED\tFILL\tPACKETS\tACCEPTED\tDROPPED\tFAILOPEN_PASSED\tFLOWS")
	for _, q := range st.Queues {
		bound := "no"
		if q.Bound {
			bound = "yes"
		}
		fo := fmt.Sprint(q.FailOpenPassed)
		if !q.FailOpenExact && q.FailOpenPassed > 0 {
			fo = "~" + fo
		}
		if q.FailOpenActive {
			fo += " (full now)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%.0f%%\t%d\t%d\t%d\t%s\t%d\n", q.Queue, bound, q.Queued, q.MaxLen, 100*q.Fill, q.Packets, q.Accepted, q.Dropped, fo, q.Flows)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	// The counter columns are the daemon's (daemon.StatusRuleColumns):
	// PACKETS, ACCEPTED, DROPPED, SHADOW (shadow-dropped), MARKED, ...
	fmt.Fprint(tw, "RULE\tLIMIT")
	for _, c := range cols {
		fmt.Fprint(tw, "\t", c.Header)
	}
	fmt.Fprintln(tw, "\tPATH")
	for _, r := range st.Rules {
		fmt.Fprintf(tw, "%s\t%s", r.Name, describeLimit(&r))
		for _, c := range cols {
			fmt.Fprintf(tw, "\t%d", c.Get(&r))
		}
		fmt.Fprintf(tw, "\t%s\n", pathOf(r.Path))
	}
	tw.Flush()
	if len(st.Totals) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TOTAL\tLIMIT\tPACKETS\tACCEPTED\tDROPPED")
	for _, t := range st.Totals {
		lim := Rule{Action: "limit", Algorithm: t.Algorithm, Rate: t.Rate, Unit: t.Unit, Burst: t.Burst, WindowSecs: t.WindowSecs}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", t.Name, limiterText(&lim), t.Packets, t.Accepted, t.Dropped)
	}
	tw.Flush()
}

// pathOf is where a rule or flow runs: "kernel" (--fastpath) or "queue"
// (also for a shaper too old to say).
func pathOf(p string) string {
	if p == "" {
		return "queue"
	}
	return p
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// describeLimit sums up a rule: "token-bucket 100 packets/s burst 5,
// polices, key 5tuple", "token-bucket 20 Mbit/s burst 250000 bytes, shapes
// (max-delay 50ms), key src", "accept".
func describeLimit(r *Rule) string {
	if r.Action != "limit" {
		return r.Action
	}
	s := limiterText(r)
	switch {
	case r.Shape:
		s += fmt.Sprintf(", shapes (max-delay %v)", time.Duration(r.MaxDelaySecs*1e9))
	case !r.Shadow && !r.MarkExceeded:
		s += ", polices"
	}
	s += ", key " + r.Key
	if r.Shadow {
		s += ", shadow"
	}
	if r.MarkExceeded {
		s += ", marks over the limit"
	}
	if r.Total != "" {
		s += ", total " + r.Total
	}
	return s
}

// limiterText is a limit rule's limiter: "token-bucket 100 packets/s burst
// 5", "fixed-window 2000 packets/s window 0.1s".
func limiterText(r *Rule) string {
	s := r.Algorithm + " " + r.RateText()
	if r.Burst > 0 {
		if r.Unit == "bytes" {
			return s + fmt.Sprintf(" burst %s bytes", strconv.FormatFloat(r.Burst, 'f', -1, 64))
		}
		return s + fmt.Sprintf(" burst %g", r.Burst)
	}
	return s + fmt.Sprintf(" window %gs", r.WindowSecs)
}

// fmtLeft shows what is left: "3.50" packets, "1500 B".
func fmtLeft(v float64, unit string) string {
	if unit == "bytes" {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// fmtSecs shows a time in seconds as a duration: "1.2s", "3m4s".
func fmtSecs(s float64) string {
	d := time.Duration(s * 1e9)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
