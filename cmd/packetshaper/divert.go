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
// divert rule can feed (divert.CheckWarnings, divertDefault the service's
// settings).
func divertWarnings(f *policy.File, stderr io.Writer) {
	for _, w := range divert.CheckWarnings(f, divertDefault) {
		fmt.Fprintln(stderr, "packetshaper check: warning:", w)
	}
}
