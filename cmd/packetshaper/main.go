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
// internal/control).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/packetshaper/packetshaper/policy"
)

// version and commit are set at build time (scripts/package.sh):
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=$(git rev-parse HEAD)"
//
// Without -X main.commit, the commit comes from the build's VCS stamp
// (debug.ReadBuildInfo's vcs.revision, when go build ran in a git checkout
// without -buildvcs=false).
var (
	version = "dev"
	commit  = ""
)

// versionLine is what "packetshaper --version" prints: the version, the
// commit ("unknown" when the build recorded none, "-dirty" when built from a
// modified tree and stamped by go build) and the Go version.
func versionLine() string {
	c, dirty := commit, false
	if bi, ok := debug.ReadBuildInfo(); ok && c == "" {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	switch {
	case c == "":
		c = "unknown"
	case dirty:
		c += "-dirty"
	}
	return fmt.Sprintf("packetshaper %s (commit %s, %s)", version, c, runtime.Version())
}

const synopsis = `packetshaper — per-flow packet shaper for Linux (NFQUEUE) and for captures

Usage:
  packetshaper [--queue N|N-M] [--policy FILE | limiter flags] [live flags]   shape live traffic from NFQUEUE (root)
  packetshaper replay [--policy FILE | limiter flags] [replay flags] FILE...  replay pcap/pcapng captures offline
  packetshaper check FILE                                                     validate a rule file, print it with defaults
  packetshaper flows [--rule R] [--top N] [--sort drops|packets|none] [--json] list the running shaper's flows (root)
  packetshaper status [--json]                                                show the running shaper's queues and rules (root)
  packetshaper --version                                                      print the version and commit

Run "packetshaper --help", "packetshaper replay --help" (or flows, status) for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "replay":
			return runReplay(args[1:], stdout, stderr)
		case "check":
			return runCheck(args[1:], stdout, stderr)
		case "flows":
			return runFlows(args[1:], stdout, stderr)
		case "status":
			return runStatus(args[1:], stdout, stderr)
		case "top":
			return runTop(args[1:], stdout, stderr)
		case "rules":
			return runRules(args[1:], stdout, stderr)
		case "version", "--version":
			fmt.Fprintln(stdout, versionLine())
			return 0
		case "help":
			fmt.Fprint(stdout, synopsis)
			return 0
		}
	}
	return runLive(args, stdout, stderr)
}

// runCheck is "packetshaper check FILE": it validates the rule file and
// prints the policy as understood, every default filled in; exit status 0,
// or 2 with the one-line error.
func runCheck(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") && args[0] != "-" {
		fmt.Fprintln(stderr, "usage: packetshaper check FILE   (validates a --policy rule file and prints it with every default filled in; - reads standard input)")
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	var f *policy.File
	var err error
	if args[0] == "-" {
		var data []byte
		if data, err = io.ReadAll(io.LimitReader(os.Stdin, policy.MaxFileSize+1)); err == nil {
			f, err = policy.Parse("stdin", data)
		}
	} else {
		f, err = policy.Load(args[0])
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
