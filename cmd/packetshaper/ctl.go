package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/daemon"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The commands that ask a running shaper through its control socket
// (package internal/control): flows and status.

const flowsUsage = `Lists the flows of the running packetshaper, like /proc/net/ipt_hashlimit/NAME:
queue, rule, flow key, packets, accepted, dropped, shadow-dropped and marked
(packets over a shadow or marking rule's limit: accepted, not dropped; as the
rule's counters in status count them), what is left (tokens of a
token bucket, or of a window's limit, in packets or bytes) and the time since
its last packet ("expired": idle past the rule's flow timeout, so its next
packet starts afresh). Most drops first by default. A listing is copied out
between batches of packets without stopping them; it is not a snapshot:
flows that come or go meanwhile may or may not appear.

It talks to the shaper's control socket (root only): --control-socket PATH,
or the default one of --queue (as the shaper was started with); with
neither, the one shaper running with a default control socket, whatever its
--queue (several: they are listed, choose one).`

const statusUsage = `Shows the running packetshaper: version, uptime, policy file and last reload;
each queue, bound or not, with the kernel queue's fill, packets decided and
fail-open passes; each rule with its limiter and counters (summed over the
queues): packets, accepted, dropped, SHADOW (what a shadow rule would have
dropped), MARKED (over the limit, accepted with a new mark), flows,
evictions.

It talks to the shaper's control socket (root only): --control-socket PATH,
or the default one of --queue (as the shaper was started with); with
neither, the one shaper running with a default control socket, whatever its
--queue (several: they are listed, choose one).`

// ctlFlags are the flags that find the control socket.
type ctlFlags struct {
	queue, socket string
	json          bool
	// explicit: --queue was given (not only its default).
	explicit bool
}

func addCtlFlags(fs *pflag.FlagSet) *ctlFlags {
	c := &ctlFlags{}
	fs.StringVar(&c.queue, "queue", "0", "the `N` or N-M of the shaper's --queue, for its default control socket (default: the one shaper running with a default socket, whatever its --queue)")
	fs.StringVar(&c.socket, "control-socket", "", "the shaper's control socket `PATH` (default: "+control.DefaultPath("0")+", or packetshaper-N[-M].sock for --queue N[-M])")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	return c
}

// ctlDir is where path looks for running shapers (tests change it).
var ctlDir = control.DefaultDir

// path is the socket to ask: --control-socket's, or --queue's default
// one; with neither flag, the one shaper running with a default socket in
// ctlDir (whatever its --queue), or queue 0's when none is. Several are an
// error that lists them, one a line.
func (c *ctlFlags) path() (string, error) {
	if c.socket != "" {
		return c.socket, nil
	}
	qs, err := parseQueues(c.queue)
	if err != nil {
		return "", err
	}
	deflt := filepath.Join(ctlDir, filepath.Base(control.DefaultPath(queueArg(qs))))
	if c.explicit {
		return deflt, nil
	}
	running, err := control.Running(ctlDir)
	if err != nil {
		return "", fmt.Errorf("looking for running shapers: %w", err)
	}
	switch len(running) {
	case 0:
		return deflt, nil
	case 1:
		return running[0], nil
	}
	return "", &severalErr{running}
}

// severalErr is path's error when several shapers are running.
type severalErr struct{ paths []string }

func (e *severalErr) Error() string {
	return fmt.Sprintf("%d shapers are running; choose one with --queue N|N-M or --control-socket PATH:\n%s", len(e.paths), strings.Join(e.paths, "\n"))
}

// queueArg formats queue numbers as --queue takes them.
func queueArg(qs []uint16) string {
	if len(qs) == 1 {
		return fmt.Sprint(qs[0])
	}
	return fmt.Sprintf("%d-%d", qs[0], qs[len(qs)-1])
}

// newCtlCmd is a command that asks the running shaper: its control
// socket's flags, then define's. run gets the parsed flags.
func newCtlCmd(c *cli, use, short, long string, define func(*pflag.FlagSet), run func(*ctlFlags) int) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: noArgs}
	cf := addCtlFlags(cmd.Flags())
	if define != nil {
		define(cmd.Flags())
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cf.explicit = cmd.Flags().Changed("queue")
		return c.exit(run(cf))
	}
	return cmd
}

// newFlowsCmd is "packetshaper flows".
func newFlowsCmd(c *cli) *cobra.Command {
	var rule, sort string
	var top int
	return newCtlCmd(c, "flows [--rule R] [--top N] [--sort drops|packets|none] [--json] [--queue N|N-M | --control-socket PATH]",
		"list the running shaper's flows (root)", flowsUsage,
		func(fs *pflag.FlagSet) {
			fs.StringVar(&rule, "rule", "", "only the flows of rule `R`")
			fs.IntVar(&top, "top", 0, "only the first `N` flows in --sort's order (0: all)")
			fs.StringVar(&sort, "sort", control.SortDrops, "the `ORDER`: drops (most dropped first, then most packets), packets (most packets first), or none (the flow tables' order, printed as it comes)")
		},
		func(cf *ctlFlags) int { return runFlows(cf, rule, sort, top, c.stdout, c.stderr) })
}

// runFlows is "packetshaper flows": exit status 0, 1 when the shaper
// cannot be asked, 2 on bad usage.
func runFlows(c *ctlFlags, rule, sort string, top int, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "packetshaper flows: "+format+"\n", a...)
		return code
	}
	switch {
	case top < 0:
		return fail(2, "--top must not be negative, not %d", top)
	case sort != control.SortDrops && sort != control.SortPackets && sort != "none":
		return fail(2, "--sort must be drops, packets or none, not %q", sort)
	case sort == "none" && top > 0:
		return fail(2, "--top needs an order: --sort drops or packets")
	}
	path, err := c.path()
	if err != nil {
		return fail(2, "%v", err)
	}
	req := control.Request{Rule: rule, Top: top}
	if top > 0 {
		req.Sort = sort
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	defer out.Flush()
	var print func(*control.Flow) error
	var tw *tabwriter.Writer
	header := func() {}
	if c.json {
		var line []byte
		print = func(f *control.Flow) error {
			line = append(f.AppendJSON(line[:0]), '\n')
			_, err := out.Write(line)
			return err
		}
	} else {
		tw = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		// The header with the first line, or at the end: not before an
		// error.
		header = sync.OnceFunc(func() {
			fmt.Fprintln(tw, "QUEUE\tRULE\tKEY\tPACKETS\tACCEPTED\tDROPPED\tSHADOW_DROPPED\tMARKED\tLEFT\tIDLE\tPATH")
		})
		print = func(f *control.Flow) error {
			header()
			idle := fmtSecs(f.IdleSecs)
			if f.Expired {
				idle += " (expired)"
			}
			_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", f.Queue, f.Rule, f.Key, f.Packets, f.Accepted, f.Dropped, f.ShadowDropped, f.Marked, fmtLeft(f.Left, f.Unit), idle, pathOf(f.Path))
			return err
		}
	}
	// The server orders --top; a whole listing is ordered here (the
	// client, not the shaper, holds the flows for that).
	var all []control.Flow
	emit := print
	if top == 0 && sort != "none" {
		emit = func(f *control.Flow) error { all = append(all, *f); return nil }
	}
	if _, err := control.ListFlows(path, req, emit); err != nil {
		if tw != nil {
			tw.Flush() // the flows received, if any
		}
		out.Flush()
		return fail(1, "%s", oneLine(err.Error()))
	}
	if all != nil {
		first := flowOrder(sort)
		slices.SortFunc(all, func(a, b control.Flow) int { return first(&a, &b) })
		for i := range all {
			if err := print(&all[i]); err != nil {
				return fail(1, "%v", err)
			}
		}
	}
	if tw != nil {
		header()
		tw.Flush()
	}
	if err := out.Flush(); err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

// flowOrder is the order of --sort (as the server's for --top).
func flowOrder(sort string) func(a, b *control.Flow) int {
	tie := func(a, b *control.Flow) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	}
	if sort == control.SortPackets {
		return func(a, b *control.Flow) int {
			return cmp.Or(cmp.Compare(b.Packets, a.Packets), cmp.Compare(b.Dropped, a.Dropped), tie(a, b))
		}
	}
	return func(a, b *control.Flow) int {
		return cmp.Or(cmp.Compare(b.Dropped, a.Dropped), cmp.Compare(b.Packets, a.Packets), tie(a, b))
	}
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

// newStatusCmd is "packetshaper status".
func newStatusCmd(c *cli) *cobra.Command {
	return newCtlCmd(c, "status [--json] [--queue N|N-M | --control-socket PATH]",
		"show the running shaper's queues and rules (root)", statusUsage, nil,
		func(cf *ctlFlags) int { return runStatus(cf, c.stdout, c.stderr) })
}

// runStatus is "packetshaper status": exit status 0, 1 when the shaper
// cannot be asked, 2 on bad usage.
func runStatus(c *ctlFlags, stdout, stderr io.Writer) int {
	path, err := c.path()
	if err != nil {
		fmt.Fprintf(stderr, "packetshaper status: %v\n", err)
		return 2
	}
	st, err := control.GetStatus(path)
	if err != nil {
		fmt.Fprintf(stderr, "packetshaper status: %s\n", oneLine(err.Error()))
		return 1
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintf(stderr, "packetshaper status: %v\n", err)
			return 1
		}
		return 0
	}
	printStatus(stdout, st)
	return 0
}

func printStatus(w io.Writer, st *control.Status) {
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
	cols := daemon.StatusRuleColumns()
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
		lim := control.Rule{Action: "limit", Algorithm: t.Algorithm, Rate: t.Rate, Unit: t.Unit, Burst: t.Burst, WindowSecs: t.WindowSecs}
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
func describeLimit(r *control.Rule) string {
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
func limiterText(r *control.Rule) string {
	s := r.Algorithm + " " + r.RateText()
	if r.Burst > 0 {
		if r.Unit == "bytes" {
			return s + fmt.Sprintf(" burst %s bytes", strconv.FormatFloat(r.Burst, 'f', -1, 64))
		}
		return s + fmt.Sprintf(" burst %g", r.Burst)
	}
	return s + fmt.Sprintf(" window %gs", r.WindowSecs)
}
