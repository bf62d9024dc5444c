package main

import (
	"io"

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
