package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/packetshaper/packetshaper/internal/divert"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/spf13/cobra"
)

// newDivertCmd is "packetshaper divert".
func newDivertCmd(c *cli) *cobra.Command {
	var pol, queue string
	cmd := &cobra.Command{
		Use:     "divert --policy FILE [--queue N|N-M]",
		Short:   "print the divert rules (packetshaper-rules options) a rule file needs",
		Long:    help("divert"),
		Example: "  packetshaper divert --policy /etc/packetshaper/policy.toml\n  sudo packetshaper-rules add --queue 0 --policy /etc/packetshaper/policy.toml",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.exit(runDivert(pol, queue, c.stdout, c.stderr))
		},
	}
	cmd.Flags().StringVar(&pol, "policy", "", "the rule `FILE`")
	cmd.Flags().StringVar(&queue, "queue", "0", "the `N` or N-M the divert rules send packets to (as packetshaper's --queue)")
	return cmd
}

// runDivert is "packetshaper divert": exit status 0, 2 on bad usage or a bad
// rule file.
func runDivert(pol, queue string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "packetshaper divert: "+format+"\n", a...)
		return 2
	}
	if pol == "" {
		return fail("--policy FILE is required")
	}
	qs, err := parseQueues(queue)
	if err != nil {
		return fail("%v", err)
	}
	f, err := policy.Load(pol)
	if err != nil {
		return fail("%s", oneLine(err.Error()))
	}
	rules, skipped := divert.Needed(f, qs)
	for _, s := range skipped {
		fmt.Fprintf(stderr, "packetshaper divert: warning: rule %q can never see a packet: %s\n", s.Rule, s.Why)
	}
	if len(rules) == 0 {
		fmt.Fprintln(stderr, "packetshaper divert: no rule needs packets diverted (accept rules' packets pass anyway)")
	}
	if w := divert.CtWarning(f, rules); w != "" {
		fmt.Fprintln(stderr, "packetshaper divert: warning:", w)
	}
	for i := range rules {
		fmt.Fprintln(stdout, strings.Join(rules[i].Args(), " "))
	}
	return 0
}

// divertDefault is the packaged service's settings file (tests change it).
var divertDefault = divert.DefaultFile

// divertWarnings writes check's warnings about the rules of f that no
// divert rule can feed: those in force in this network namespace (rules.sh's
// rules, by their comments) or, with none, those divertDefault's QUEUE and
// RULES_OPTS would install. Nothing when neither is there.
func divertWarnings(f *policy.File, stderr io.Writer) {
	if rules, _ := divert.Needed(f, nil); divert.CtWarning(f, rules) != "" {
		fmt.Fprintln(stderr, "packetshaper check: warning:", divert.CtWarning(f, rules))
	}
	ds, from := divert.InForce()
	source := "by the rules in force (" + strings.Join(from, ", ") + ")"
	if len(ds) == 0 {
		queue, opts, ok, err := divert.ReadDefault(divertDefault)
		if err != nil {
			fmt.Fprintf(stderr, "packetshaper check: warning: %s: %v (divert rules not checked)\n", divertDefault, err)
			return
		}
		if !ok {
			return
		}
		d, pf, err := divert.FromOptions(queue, opts)
		if err != nil {
			fmt.Fprintf(stderr, "packetshaper check: warning: %s: RULES_OPTS: %v (divert rules not checked)\n", divertDefault, err)
			return
		}
		source = fmt.Sprintf("by %s's RULES_OPTS (QUEUE=%s)", divertDefault, queue)
		ds = []divert.Rule{d}
		if pf != "" {
			// The rules of that file, on QUEUE's queues.
			pfile, err := policy.Load(pf)
			if err != nil {
				fmt.Fprintf(stderr, "packetshaper check: warning: %s: RULES_OPTS --policy: %s (divert rules not checked)\n", divertDefault, oneLine(err.Error()))
				return
			}
			var qs []uint16
			for q := int(d.QueueLo); q <= int(d.QueueHi); q++ {
				qs = append(qs, uint16(q))
			}
			ds, _ = divert.Needed(pfile, qs)
			for i := range ds {
				ds[i].QueueLo, ds[i].QueueHi, ds[i].Chain = d.QueueLo, d.QueueHi, d.Chain
			}
		}
	}
	for _, w := range divert.Unseen(f, ds) {
		if w.Owner {
			fmt.Fprintf(stderr, "packetshaper check: warning: %s (diverted %s)\n", w, source)
			continue
		}
		fmt.Fprintf(stderr, "packetshaper check: warning: %s %s (packetshaper divert --policy FILE prints the divert rules the file needs)\n", w, source)
	}
}
