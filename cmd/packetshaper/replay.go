package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/packetshaper/packetshaper/internal/daemon"
	"github.com/packetshaper/packetshaper/internal/report"
	"github.com/packetshaper/packetshaper/internal/term"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
	"github.com/packetshaper/packetshaper/shaper"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// replayFlags are replay's own flags.
type replayFlags struct {
	queue                                     uint
	asJSON                                    bool
	verdicts, writeAcc, writeDrop, reportPath string
	top, maxHeld                              int
	progress                                  string
	concatenate                               bool
	maxBackward, maxGap                       time.Duration
}

// newReplayCmd is "packetshaper replay".
func newReplayCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay [--policy FILE | limiter flags] [flags] FILE...",
		Short: "replay pcap/pcapng captures offline through the shaper (FILE \"-\": standard input)",
		Long:  help("replay"),
		Example: `  packetshaper replay --pps 100 --burst 10 capture.pcap
  packetshaper replay --policy policy.toml --report report.html --json capture.pcapng.gz`,
	}
	rf := &replayFlags{}
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.UintVar(&rf.queue, "queue", 0, "the NFQUEUE number the packets are taken to come from, for rules that match queues")
	fs.BoolVar(&rf.asJSON, "json", false, "print one JSON object (totals and per_flow) instead of the summary")
	fs.StringVar(&rf.verdicts, "verdicts", "", "write one line per packet, `FILE`: \"<index> <ACCEPT|DROP>\", index from 1 over all records; \"<index> ACCEPT +<ns>\" for a packet a shaping rule delays")
	fs.StringVar(&rf.writeAcc, "write-accepted", "", "write the accepted packets to pcap `FILE` (original link type and timestamps, a delayed packet's departure time as its timestamp, in departure order; pcapng if FILE ends in .pcapng, needed when the captures mix link types)")
	fs.StringVar(&rf.writeDrop, "write-dropped", "", "write the dropped packets to pcap `FILE` (pcapng if it ends in .pcapng)")
	fs.StringVar(&rf.reportPath, "report", "", "write an HTML report to `FILE`: packets offered, accepted and dropped per second over capture time, in total and per rule, the top flows by drops and the settings (one self-contained file)")
	fs.IntVar(&rf.top, "top", 10, "how many flows the summary (and --report) lists (most drops first)")
	fs.StringVar(&rf.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always or never")
	fs.IntVar(&rf.maxHeld, "max-held", nfq.DefaultMaxHeld, fmt.Sprintf("with shaping rules: the most packets held at once for a later departure, as live's --max-held (one queue's); a packet a shaping rule would delay beyond it, or beyond %d MiB of held packets, is dropped (shape_overflow); 0: none held", replay.MaxHeldBytes>>20))
	fs.BoolVar(&rf.concatenate, "concatenate", false, "several FILEs are one capture, their timestamps one clock (the parts of one ring-buffer capture); without it each file keeps its own clock, its first packet just after the previous file's last")
	fs.DurationVar(&rf.maxBackward, "max-backward", replay.DefaultMaxBackward, "warn when capture time goes back by more than `D` between two packets (0: never)")
	fs.DurationVar(&rf.maxGap, "max-gap", replay.DefaultMaxGap, "warn when capture time jumps forward by more than `D` between two packets (0: never)")
	clihelp.AddGroup(cmd.Flags(), "", fs)
	pf := addPolicyFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return c.exit(runReplay(cmd.Flags(), pf, rf, args, c.stdout, c.stderr))
	}
	return cmd
}

// runReplay is "packetshaper replay": exit status 0 on success, 1 when a
// capture or an output fails (after reporting what was replayed before),
// 2 on bad usage.
func runReplay(fs *pflag.FlagSet, pf *policyFlags, rf *replayFlags, files []string, stdout, stderr io.Writer) int {
	queue, asJSON, verdicts, writeAcc, writeDrop, reportPath := &rf.queue, &rf.asJSON, &rf.verdicts, &rf.writeAcc, &rf.writeDrop, &rf.reportPath
	top, progress, maxHeld := &rf.top, &rf.progress, &rf.maxHeld
	if len(files) == 0 {
		fmt.Fprintln(stderr, "packetshaper replay: no capture file given (packetshaper replay --help)")
		return 2
	}
	if *maxHeld < 0 || *maxHeld > nfq.MaxMaxHeld {
		fmt.Fprintf(stderr, "packetshaper replay: --max-held must be between 0 and %d, not %d\n", nfq.MaxMaxHeld, *maxHeld)
		return 2
	}
	if *queue > 65535 {
		fmt.Fprintf(stderr, "packetshaper replay: --queue must be between 0 and 65535, not %d\n", *queue)
		return 2
	}
	src, err := pf.source(policy.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", err)
		return 2
	}
	polFile, comp, err := src.loadFile()
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", oneLine(err.Error()))
		return 2
	}
	// Global rules and totals run as local ones: a capture holds one
	// host's view. Their Global is nil, which is how the engine runs them.
	asLocal := comp.GlobalRules()
	for _, n := range comp.GlobalTotals() {
		asLocal = append(asLocal, daemon.TotalStoreName(n))
	}
	if len(asLocal) > 0 {
		fmt.Fprintf(stderr, "packetshaper replay: global rule(s) %s replayed as local: a capture holds one host's view\n", strings.Join(asLocal, ", "))
	}
	// A capture holds no marks: a mark match sees mark 0 on every packet.
	if marks := markRules(polFile); len(marks) > 0 {
		fmt.Fprintf(stderr, "packetshaper replay: warning: rule(s) %s match marks: a capture holds none, every replayed packet has mark 0\n", strings.Join(marks, ", "))
	}
	pol := comp.Policy()
	pol.Malformed = src.malformed
	eng, err := shaper.NewPolicy(pol)
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", err)
		return 2
	}
	var showProgress bool
	switch *progress {
	case "auto":
		showProgress = term.IsTerminal(stderr)
	case "always":
		showProgress = true
	case "never":
	default:
		fmt.Fprintf(stderr, "packetshaper replay: --progress must be auto, always or never, not %q\n", *progress)
		return 2
	}

	// A capture that cannot be opened fails before anything is replayed.
	sizes, inputs, err := replay.StatInputs(files)
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", oneLine(err.Error()))
		return 1
	}
	capFiles := make([]report.File, len(files))
	for i, name := range files {
		capFiles[i] = report.File{Name: name, Size: sizes[i]}
	}
	opts := replay.Options{
		AcceptedNg: strings.HasSuffix(*writeAcc, ".pcapng"),
		DroppedNg:  strings.HasSuffix(*writeDrop, ".pcapng"),
		IfaceID:    comp.IfaceID,
		Queue:      uint16(*queue),
		Timeline:   *reportPath != "",
		MaxHeld:    *maxHeld,
		// ct-state matches get their state from replay's tracker of
		// the capture's connections, as large as the largest flow
		// table.
		Conntrack:    len(comp.CtStateRules()) > 0,
		ConntrackMax: maxFlows(comp),
		// Replay's 0 is its default; the flag's 0 is never.
		OwnClocks:   !rf.concatenate,
		MaxBackward: cmp.Or(rf.maxBackward, -1),
		MaxGap:      cmp.Or(rf.maxGap, -1),
	}
	if *maxHeld == 0 {
		opts.MaxHeld = -1 // none held
	}
	var reportOut io.Writer
	outs, err := replay.CreateOutputs([]replay.OutFile{
		{Flag: "--verdicts", Path: *verdicts, Dst: &opts.Verdicts},
		{Flag: "--write-accepted", Path: *writeAcc, Dst: &opts.Accepted},
		{Flag: "--write-dropped", Path: *writeDrop, Dst: &opts.Dropped},
		{Flag: "--report", Path: *reportPath, Dst: &reportOut},
	}, inputs)
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", err)
		var ow *replay.OverwriteError
		if errors.As(err, &ow) {
			return 2
		}
		return 1
	}
	start := time.Now()
	var bar *term.Bar
	if showProgress {
		bar = term.NewBar(stderr, start)
		opts.Progress = func(p replay.Progress) { bar.Update(p.File, p.Read, p.Size, p.Packets) }
	}

	opts.Warn = func(w string) {
		bar.Clear()
		fmt.Fprintln(stderr, "packetshaper replay: warning:", w)
	}
	r := replay.New(eng, opts)
	var failed error
	for _, name := range files {
		if failed = r.ReplayFile(name); failed != nil {
			break
		}
	}
	elapsed := time.Since(start)
	bar.Clear()
	if n := r.TimeJumps(); n > 5 {
		fmt.Fprintf(stderr, "packetshaper replay: warning: capture time jumped %d times in all (--max-backward %v, --max-gap %v)\n", n, rf.maxBackward, rf.maxGap)
	}
	if err := r.Flush(); err != nil && failed == nil {
		failed = err
	}
	var reportErr error
	if reportOut != nil {
		in := report.Input{
			Args: clihelp.SettingArgs(fs, outputFlags, files), Policy: polFile, PolicySource: src.Describe(), Files: capFiles,
			Queue: uint16(*queue), Malformed: src.malformed, Top: *top,
		}
		if failed != nil {
			in.Err = oneLine(failed.Error())
		}
		if err := report.Write(reportOut, r, in); err != nil {
			reportErr = fmt.Errorf("--report: %w", err)
		}
	}
	for _, f := range outs {
		if err := f.Close(); err != nil {
			switch {
			case io.Writer(f) == reportOut:
				if reportErr == nil {
					reportErr = fmt.Errorf("--report: %w", err)
				}
			case failed == nil:
				failed = err
			}
		}
	}
	// Where the report is, one line (it holds what was replayed, and the
	// error if any).
	if reportOut != nil && reportErr == nil {
		fmt.Fprintf(stderr, "packetshaper replay: report written to %s\n", *reportPath)
	}
	if failed == nil {
		failed = reportErr
	}
	// Report what was replayed, also when a capture was damaged; not
	// when nothing was (not a capture at all): then only the error.
	switch {
	case failed != nil && r.Summary().Packets == 0:
	case *asJSON:
		if err := r.WriteJSON(stdout, asLocal); err != nil && failed == nil {
			failed = err
		}
	default:
		r.WriteSummary(stdout, len(files), elapsed, *top, asLocal)
	}
	if failed != nil {
		fmt.Fprintln(stderr, "packetshaper replay:", oneLine(failed.Error()))
		return 1
	}
	return 0
}

// outputFlags are replay's flags that choose outputs, not what is
// replayed or how.
var outputFlags = map[string]bool{"json": true, "verdicts": true, "write-accepted": true, "write-dropped": true, "report": true, "progress": true, "top": true}

// markRules names the rules of f with a mark match.
func markRules(f *policy.File) []string {
	var out []string
	if f == nil {
		return nil
	}
	for _, r := range f.Rules {
		if r.Match != nil && r.Match.Mark != "" {
			out = append(out, r.Name)
		}
	}
	return out
}

// maxFlows is the largest flow table of the policy's limit rules.
func maxFlows(c *policy.Compiled) int {
	n := 0
	for _, r := range c.Policy().Rules {
		n = max(n, r.Limit.MaxFlows)
	}
	return n
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
