package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/daemon"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The commands that ask a running shaper through its control socket
// (package internal/control): flows and status.

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

// path is the socket to ask (control.Choose in ctlDir).
func (c *ctlFlags) path() (string, error) {
	if c.socket != "" {
		return c.socket, nil
	}
	qs, err := parseQueues(c.queue)
	if err != nil {
		return "", err
	}
	return control.Choose(ctlDir, nfq.FormatQueues(qs), c.explicit)
}

// newCtlCmd is a command that asks the running shaper: its control
// socket's flags, then define's; its long help is help/NAME.txt. run gets
// the parsed flags.
func newCtlCmd(c *cli, use, short string, define func(*pflag.FlagSet), run func(*ctlFlags) int) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: noArgs}
	cmd.Long = help(cmd.Name())
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
		"list the running shaper's flows (root)",
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
	out := control.NewFlowWriter(stdout, c.json)
	if _, err := control.ListSorted(path, req, sort, out.Write); err != nil {
		out.Partial() // the flows received, if any
		return fail(1, "%s", oneLine(err.Error()))
	}
	if err := out.Flush(); err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

// newStatusCmd is "packetshaper status".
func newStatusCmd(c *cli) *cobra.Command {
	return newCtlCmd(c, "status [--json] [--queue N|N-M | --control-socket PATH]",
		"show the running shaper's queues and rules (root)", nil,
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

// printStatus writes st as a table, its rule columns the daemon's
// counters'.
func printStatus(w io.Writer, st *control.Status) {
	var cols []control.RuleColumn
	for _, c := range daemon.StatusRuleColumns() {
		cols = append(cols, control.RuleColumn{Header: c.Header, Get: c.Get})
	}
	control.WriteStatus(w, st, cols)
}
