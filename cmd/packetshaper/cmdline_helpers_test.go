package main

import (
	"io"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/replay"
)

// The subcommands as the tests run them: through the command tree.
func runLiveArgs(args []string, stdout, stderr io.Writer) int { return run(args, stdout, stderr) }
func runReplayArgs(args []string, stdout, stderr io.Writer) int {
	return run(append([]string{"replay"}, args...), stdout, stderr)
}
func runFlowsArgs(args []string, stdout, stderr io.Writer) int {
	return run(append([]string{"flows"}, args...), stdout, stderr)
}
func runStatusArgs(args []string, stdout, stderr io.Writer) int {
	return run(append([]string{"status"}, args...), stdout, stderr)
}

// replay's --json objects, as the tests read them back.
type (
	jsonReport = replay.JSONReport
	jsonRule   = replay.JSONRule
)

// wantLines checks that out (what names it) holds each of wants.
func wantLines(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}
