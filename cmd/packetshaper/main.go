// Command packetshaper is a per-flow packet shaper for Linux.
//
//	packetshaper [--queue N|N-M] [--policy FILE | limiter flags]   live: decide packets from NFQUEUE
//	packetshaper replay [--policy FILE | limiter flags] FILE...    offline: replay pcap/pcapng captures
//	packetshaper check FILE                                        validate a rule file
//	packetshaper flows | status                                    ask the running shaper (control socket)
//
// main only wires flags to packages: the live path is in live.go (package
// daemon), replay in replay.go (package replay), the policy flags both share
// in flags.go (package policy), flows and status in ctl.go (package
// internal/control); help and usage are internal/clihelp's, the commands'
// long help help/*.txt. What they print is the packages' (layouttest's
// TestCmdIsWiring holds this package to 1 300 lines).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/packetshaper/packetshaper/internal/buildinfo"
	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/spf13/cobra"
)

// version and commit are set at build time (scripts/package.sh), which
// works whatever -buildvcs says:
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/packetshaper
//
// Without -X main.version, the version is the module's from the build info
// (go install ...@v0.1.0 records it); without -X main.commit, the commit is
// the build's VCS stamp (debug.ReadBuildInfo's vcs.revision, when go build
// ran in a git checkout without -buildvcs=false).
var (
	version = ""
	commit  = ""
)

// versionLine is what "packetshaper --version" prints: the version, the
// commit ("-dirty" when built from a modified tree and stamped by go build)
// and the Go version.
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return buildinfo.Line(version, commit, bi)
}

// buildVersion is the version alone, "dev" when none is stamped (status,
// packetshaper_build_info).
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return buildinfo.Version(version, commit, bi)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// newVersionCmd is "packetshaper version" (as --version).
func newVersionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version and commit",
		Args:  noArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(c.stdout, versionLine()) },
	}
}

// newCheckCmd is "packetshaper check FILE".
func newCheckCmd(c *cli) *cobra.Command {
	var fast bool
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "validate a rule file and print it with every default filled in",
		Long: `Validates a --policy rule file (FILE "-": standard input) and prints it with
every default filled in; warnings (a raised flow-timeout, ...) go to stderr.
With --fastpath, stderr also says, one line per rule, where each rule would
run under packetshaper --fastpath: in the kernel (the eBPF fast path) or in
user space (NFQUEUE), and why, then which Linux release each attach mode
needs and the kernel memory the program's maps would take (docs/fastpath.md).
Exit status 0, or 2 with a one-line error naming FILE:LINE:COL.`,
		Example: "  packetshaper check /etc/packetshaper/policy.toml",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &usageError{fmt.Sprintf("want one FILE, not %d arguments%s", len(args), clihelp.SeeHelp(cmd))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.exit(runCheck(args[0], fast, c.stdout, c.stderr))
		},
	}
	cmd.Flags().BoolVar(&fast, "fastpath", false, "also say on stderr, one line per rule, whether it would run in the kernel (--fastpath) or in user space, and why")
	return cmd
}

// runCheck is "packetshaper check FILE": it validates the rule file and
// prints the policy as understood, every default filled in; exit status 0,
// or 2 with the one-line error. fast: also the fast path's split, one
// line per rule on stderr.
func runCheck(file string, fast bool, stdout, stderr io.Writer) int {
	var f *policy.File
	var err error
	if file == "-" {
		var data []byte
		if data, err = io.ReadAll(io.LimitReader(os.Stdin, policy.MaxFileSize+1)); err == nil {
			f, err = policy.Parse("stdin", data)
		}
	} else {
		f, err = policy.Load(file)
	}
	if err == nil {
		var c *policy.Compiled
		if c, err = f.Compile(policy.Options{}); err == nil {
			for _, w := range c.Warnings() {
				fmt.Fprintln(stderr, "packetshaper check: warning:", w)
			}
			divertWarnings(f, stderr)
		}
	}
	if err == nil && fast {
		var reasons []fastpath.Reason
		var spec fastpath.Spec
		if spec, reasons, err = fastpath.Compile(f, policy.Options{}); err == nil {
			for _, r := range reasons {
				fmt.Fprintln(stderr, "packetshaper check: fastpath:", r)
			}
			for _, l := range fastpath.CheckLines(spec) {
				fmt.Fprintln(stderr, "packetshaper check:", l)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper check:", oneLine(err.Error()))
		return 2
	}
	if err := f.Format(stdout); err != nil {
		fmt.Fprintln(stderr, "packetshaper check:", oneLine(err.Error()))
		return 1
	}
	return 0
}
