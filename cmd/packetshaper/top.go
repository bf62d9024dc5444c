package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/packetshaper/packetshaper/internal/top"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newTopCmd is "packetshaper top".
func newTopCmd(c *cli) *cobra.Command {
	var sortBy, rule string
	var interval time.Duration
	var rows int
	var once bool
	return newCtlCmd(c, "top [--interval D] [--sort drops|packets] [--rule R] [--rows N] [--once] [--json] [--queue N|N-M | --control-socket PATH]",
		"a live view of the running shaper's rule and flow rates (root)",
		func(fs *pflag.FlagSet) {
			fs.DurationVar(&interval, "interval", time.Second, "the time `D` between refreshes")
			fs.StringVar(&sortBy, "sort", "drops", "the flows' first `ORDER`: drops (most dropped per second first) or packets")
			fs.StringVar(&rule, "rule", "", "only the flows of rule `R`")
			fs.IntVar(&rows, "rows", top.DefaultRows, "the `N` flows of a frame not on a terminal (a terminal's height decides there)")
			fs.BoolVar(&once, "once", false, "print one frame and exit")
		},
		func(cf *ctlFlags) int { return runTop(cf, sortBy, rule, interval, rows, once, c.stdout, c.stderr) })
}

// runTop is "packetshaper top": exit status 0, 1 when the shaper cannot be
// asked, 2 on bad usage.
func runTop(c *ctlFlags, sortBy, rule string, interval time.Duration, rows int, once bool, stdout, stderr io.Writer) int {
	sort, ok := top.ParseSort(sortBy)
	switch {
	case !ok:
		fmt.Fprintf(stderr, "packetshaper top: --sort must be drops or packets, not %q\n", sortBy)
		return 2
	case interval < 100*time.Millisecond:
		fmt.Fprintf(stderr, "packetshaper top: --interval must be at least 100ms, not %v\n", interval)
		return 2
	case rows < 1:
		fmt.Fprintf(stderr, "packetshaper top: --rows must be at least 1, not %d\n", rows)
		return 2
	}
	path, err := c.path()
	if err != nil {
		fmt.Fprintf(stderr, "packetshaper top: %v\n", err)
		return 2
	}
	o := top.Options{Source: top.ControlSource(path, rule, time.Now), Interval: interval, Sort: sort, Rows: rows, Once: once, JSON: c.json}
	var err2 error
	if f, ok := stdout.(*os.File); ok {
		err2 = top.Run(o, os.Stdin, f)
	} else {
		err2 = top.Once(o, stdout, 0)
	}
	if err2 != nil {
		fmt.Fprintf(stderr, "packetshaper top: %s\n", oneLine(err2.Error()))
		return 1
	}
	return 0
}
