package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/internal/report"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
	"github.com/packetshaper/packetshaper/shaper"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const replayUsage = `Replays pcap/pcapng captures (gzip-compressed or not) through the shaper,
with each packet's capture timestamp as the clock: the what-if report of a
policy on a capture before it is deployed. Several files are replayed in
the order given through one engine, each with its own clock (its first
packet just after the previous file's last), or with --concatenate as one
capture, their timestamps one clock. Capture time going back by more than
--max-backward or forward by more than --max-gap between two packets is
warned on stderr (the first 5, then a count). Prints a summary with a per-rule table, or with --json one
JSON object: packets, accepted, dropped, delayed and shape_overflow (shaping
rules: packets accepted later, packets their full queue dropped),
delay_p50_ns/delay_p99_ns/delay_max_ns (how long the delayed ones waited),
malformed (invalid IP header),
no_ports (ports unreadable: limited by address and protocol), unmatched (no
rule matched: accepted), non_ip (ARP, LLDP, ...: accepted, not limited), flows
(in the flow tables at the end), flows_seen (table insertions), evictions,
expired, first_ns/last_ns/duration_ns (capture time), rules (per rule, in
policy order: name, packets, accepted, dropped, shadow_dropped, marked,
delayed, shape_overflow, flows, evictions) and per_flow (with the rule of each flow). per_flow lists the flows
still in the tables at the end: evicted or expired flows count in the totals
only, so memory stays bounded by the tables, not by the capture. In a pcapng
capture, the interface a packet was captured on stands for both its iif and
its oif.

Shaping rules hold packets as live does: at most --max-held at once (and at
most 32 MiB of them); a packet a shaping rule would delay beyond that is
dropped, uncharged (shape_overflow), so replay passes what live would.

--report FILE also writes one self-contained HTML page (no script, nothing
fetched): packets offered, accepted and dropped per second over capture
time, in total and per rule (shadow drops, marks), unmatched and non-IP
traffic, the top flows by drops, the policy and the captures. It holds no
wall-clock time: the same replay writes the same bytes.

On a damaged capture, what was read before the damage is reported, then a
one-line error names the file, the packet and the problem; exit status 1.`

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
		Long:  replayUsage,
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
	addGroup(cmd.Flags(), "", fs)
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
	// Global rules run as local ones: a capture holds one host's view.
	// Their Global is nil, which is how the engine runs them.
	asLocal := comp.GlobalRules()
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
		showProgress = isTerminal(stderr)
	case "always":
		showProgress = true
	case "never":
	default:
		fmt.Fprintf(stderr, "packetshaper replay: --progress must be auto, always or never, not %q\n", *progress)
		return 2
	}

	// A file that cannot be opened at all is a usage error caught before
	// anything is replayed or any output created (damage inside a capture
	// is reported after the packets before it).
	var inputs []os.FileInfo
	capFiles := make([]report.File, len(files))
	for i, name := range files {
		capFiles[i] = report.File{Name: name, Size: -1}
		if name == "-" {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "packetshaper replay:", oneLine(err.Error()))
			return 1
		}
		if st, err := f.Stat(); err == nil {
			inputs = append(inputs, st)
			capFiles[i].Size = st.Size()
		}
		f.Close()
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
	var outs []*os.File
	var reportOut io.Writer
	for _, o := range []struct {
		flag, path string
		dst        *io.Writer
	}{
		{"--verdicts", *verdicts, &opts.Verdicts},
		{"--write-accepted", *writeAcc, &opts.Accepted},
		{"--write-dropped", *writeDrop, &opts.Dropped},
		{"--report", *reportPath, &reportOut},
	} {
		if o.path == "" {
			continue
		}
		if st, err := os.Stat(o.path); err == nil {
			for _, in := range inputs {
				if os.SameFile(st, in) {
					fmt.Fprintf(stderr, "packetshaper replay: %s %s is also a capture to replay: it would be overwritten\n", o.flag, o.path)
					return 2
				}
			}
		}
		f, err := os.Create(o.path)
		if err != nil {
			fmt.Fprintf(stderr, "packetshaper replay: %s: %v\n", o.flag, err)
			return 1
		}
		outs = append(outs, f)
		*o.dst = f
	}
	start := time.Now()
	var bar *progressBar
	if showProgress {
		bar = &progressBar{w: stderr, start: start}
		opts.Progress = bar.update
	}

	opts.Warn = func(w string) {
		bar.clear()
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
	bar.clear()
	if n := r.TimeJumps(); n > 5 {
		fmt.Fprintf(stderr, "packetshaper replay: warning: capture time jumped %d times in all (--max-backward %v, --max-gap %v)\n", n, rf.maxBackward, rf.maxGap)
	}
	if err := r.Flush(); err != nil && failed == nil {
		failed = err
	}
	var reportErr error
	if reportOut != nil {
		in := report.Input{
			Args: settingArgs(fs, files), Policy: polFile, PolicySource: src.Describe(), Files: capFiles,
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
		if err := writeJSON(stdout, r, asLocal); err != nil && failed == nil {
			failed = err
		}
	default:
		writeSummary(stdout, r, len(files), elapsed, *top, asLocal)
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

// settingArgs is the command line that replays what fs (parsed) replays,
// outputs left out, flags in name order: the report's "command", the
// same whatever the outputs' names.
func settingArgs(fs *pflag.FlagSet, files []string) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if outputFlags[f.Name] {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			args = append(args, "--"+f.Name+"="+f.Value.String())
			return
		}
		args = append(args, "--"+f.Name, f.Value.String())
	})
	return append(args, files...)
}

func writeJSON(w io.Writer, r *replay.Replayer, asLocal []string) error {
	s := r.Summary()
	rep := jsonReport{
		Packets: s.Packets, Accepted: s.Accepted, Dropped: s.Dropped,
		Delayed: s.Delayed, ShapeOverflow: s.ShapeOverflow,
		DelayP50Ns: s.Delays.P50, DelayP99Ns: s.Delays.P99, DelayMaxNs: s.Delays.Max,
		Malformed: s.Malformed,
		NoPorts:   s.NoPorts, Unmatched: s.Unmatched, NonIP: s.NonIP,
		Flows: s.Flows, FlowsSeen: s.FlowsSeen, Evictions: s.Evictions, Expired: s.Expired,
		FirstNs: s.First, LastNs: s.Last, DurationNs: int64(s.Duration()),
		Rules: []jsonRule{}, GlobalAsLocal: asLocal,
	}
	rules := r.Rules()
	for _, ru := range rules {
		rep.Rules = append(rep.Rules, jsonRule{Name: ru.Name, Packets: ru.Packets, Accepted: ru.Accepted, Dropped: ru.Dropped,
			ShadowDropped: ru.ShadowDropped, Marked: ru.Marked, Delayed: ru.Delayed, ShapeOverflow: ru.ShapeOverflow,
			Flows: ru.Flows, Evictions: ru.Evictions})
	}
	// Everything but per_flow, which is streamed after it: a million
	// flows never make a million strings at once. Naming each flow makes
	// garbage, which the collector would let grow as large as the live
	// heap (the tables) before collecting: collect early meanwhile.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var head bytes.Buffer
	enc := json.NewEncoder(&head)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "udp a:1 > b:2", not "\u003e"
	if err := enc.Encode(rep); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(bytes.TrimSuffix(head.Bytes(), []byte("\n}\n")))
	bw.WriteString(",\n  \"per_flow\": [")
	// Each flow is written in place: jf's members (its keys, pointers to
	// its fields) made once, no encoder's reflection.
	var jf jsonFlow
	members := jf.members()
	var one []byte
	n := 0
	var err error
	r.EachFlow(func(f replay.FlowSummary) {
		if err != nil {
			return
		}
		jf = jsonFlow{Rule: rules[f.Rule].Name, Flow: f.Flow, Packets: f.Packets, Accepted: f.Accepted, Dropped: f.Dropped,
			ShadowDropped: f.ShadowDropped, Marked: f.Marked}
		if one, err = appendMembers(one[:0], members, "    ", "  "); err != nil {
			return
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		bw.Write(one)
		n++
	})
	if err != nil {
		return err
	}
	if n > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}

func writeSummary(w io.Writer, r *replay.Replayer, files int, elapsed time.Duration, top int, asLocal []string) {
	s := r.Summary()
	fmt.Fprintf(w, "packets    %d: accepted %d, dropped %d (malformed %d, %s %d, unmatched %d, non_ip %d)\n",
		s.Packets, s.Accepted, s.Dropped, s.Malformed, countname.NoPorts, s.NoPorts, s.Unmatched, s.NonIP)
	fmt.Fprintf(w, "flows      %d in the table at the end, %d seen, %d evicted, %d expired\n",
		s.Flows, s.FlowsSeen, s.Evictions, s.Expired)
	if s.Delayed > 0 || s.ShapeOverflow > 0 {
		fmt.Fprintf(w, "shaping    delayed %d, %s %d; delay p50 %v, p99 %v, max %v\n",
			s.Delayed, countname.ShapeOverflow, s.ShapeOverflow, time.Duration(s.Delays.P50), time.Duration(s.Delays.P99), time.Duration(s.Delays.Max))
	}
	if ct := r.Conntrack(); ct != nil {
		fmt.Fprintf(w, "conntrack  new %d, established %d, related %d, invalid %d (replay's tracker, for ct-state matches)\n", ct.New, ct.Established, ct.Related, ct.Invalid)
		if ct.PickedUp > 0 || ct.OneWay > 0 || ct.Evicted > 0 {
			fmt.Fprintf(w, "           where the kernel may differ: %d TCP packets of connections the capture does not open (taken as established; the kernel gives the first of each new), %d conversations seen one way only (every packet new: an asymmetric capture?), %d evicted from a full table\n", ct.PickedUp, ct.OneWay, ct.Evicted)
		}
	}
	if s.NoOwner > 0 {
		fmt.Fprintf(w, "no owner   %d packets of rules keyed by uid or gid: a capture holds no socket owners, so each such rule had one flow, \"no owner\"\n", s.NoOwner)
	}
	fmt.Fprintf(w, "capture    %d file(s), %v of capture time\n", files, s.Duration())
	rate := 0.0
	if elapsed > 0 {
		rate = float64(s.Packets) / elapsed.Seconds()
	}
	round := time.Millisecond
	if elapsed < time.Second {
		round = time.Microsecond
	}
	fmt.Fprintf(w, "replay     %v, %s packets/s\n", elapsed.Round(round), humanRate(rate))
	fmt.Fprintf(w, "rules:\n  %-20s %10s %10s %10s %10s %10s %8s %9s\n", "RULE", "PACKETS", "ACCEPTED", "DROPPED", "SHADOWDROP", "MARKED", "FLOWS", "EVICTIONS")
	for _, ru := range r.Rules() {
		fmt.Fprintf(w, "  %-20s %10d %10d %10d %10d %10d %8d %9d\n", ru.Name, ru.Packets, ru.Accepted, ru.Dropped, ru.ShadowDropped, ru.Marked, ru.Flows, ru.Evictions)
	}
	if ts := r.Totals(); len(ts) > 0 {
		fmt.Fprintf(w, "totals (accepted: passed and charged; dropped: over the total):\n  %-20s %10s %10s %10s\n", "TOTAL", "PACKETS", "ACCEPTED", "DROPPED")
		for _, t := range ts {
			fmt.Fprintf(w, "  %-20s %10d %10d %10d\n", t.Name, t.Packets, t.Accepted, t.Dropped)
		}
	}
	if len(asLocal) > 0 {
		fmt.Fprintf(w, "global rules replayed as local (a capture holds one host's view): %s\n", strings.Join(asLocal, ", "))
	}
	// The flows over their limit: most drops first, then most shadow
	// drops or marks (accepted: shadow and marking rules).
	fl := r.Flows(top)
	over := func(f *replay.FlowSummary) bool { return f.Dropped+f.ShadowDropped+f.Marked > 0 }
	if len(fl) == 0 || !over(&fl[0]) {
		fmt.Fprintln(w, "no flow had drops, shadow drops or marks")
		return
	}
	fmt.Fprintln(w, "flows with the most drops (then shadow drops, marks):")
	fmt.Fprintf(w, "  %10s %10s %10s %10s  %-20s %s\n", "DROPPED", "SHADOWDROP", "MARKED", "PACKETS", "RULE", "FLOW")
	rules := r.Rules()
	for _, f := range fl {
		if !over(&f) {
			break
		}
		fmt.Fprintf(w, "  %10d %10d %10d %10d  %-20s %s\n", f.Dropped, f.ShadowDropped, f.Marked, f.Packets, rules[f.Rule].Name, f.Flow)
	}
}

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

func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressBar draws a one-line progress bar on a terminal, once a replay
// has run for more than a second.
type progressBar struct {
	w     io.Writer
	start time.Time
	drawn bool
}

func (b *progressBar) update(p replay.Progress) {
	el := time.Since(b.start)
	if el < time.Second {
		return
	}
	const width = 30
	line := fmt.Sprintf("\r%s: %d packets", p.File, p.Packets)
	if p.Size > 0 {
		frac := min(float64(p.Read)/float64(p.Size), 1)
		n := int(frac * width)
		line = fmt.Sprintf("\r[%s%s] %3.0f%% %s: %d packets", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, p.File, p.Packets)
	}
	fmt.Fprint(b.w, line+"\x1b[K")
	b.drawn = true
}

func (b *progressBar) clear() {
	if b != nil && b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
