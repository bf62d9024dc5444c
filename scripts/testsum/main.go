// Command testsum reads the JSON that `go test -json` writes and says what
// ran: scripts/test.sh runs every stage through it and ends with its
// summary.
//
//	go test -json ./... | tee unit.json | testsum stream
//	testsum record -action pass|fail|skip [-reason TEXT] NAME >>stage.json
//	testsum record -exit N >>stage.json
//	testsum record -wall SECONDS >>stage.json
//	testsum summary [-wall SECONDS] STAGE=FILE...
//
// stream prints, as the events come, each top-level test's result, every
// failing test with its output, every skipped test with its reason and each
// package's result; lines that are not JSON pass through.
//
// record writes one event in go test's JSON for a check that is not a Go
// test (go vet, a shell script), so that it counts as a test of its stage;
// with -exit, the exit status of the stage's command: one that is not 0
// where no test failed counts as a failure (a build that failed, a go
// command error); with -wall, the wall time the stage took (several add
// up).
//
// summary counts, per stage and in total, the tests (subtests and fuzz
// targets included) that passed, failed and were skipped, lists every
// skipped test with its reason (its t.Skip message) and every failure, and
// ends with the line "N passed, N failed, N skipped". When a stage
// recorded its wall time, or -wall gives the whole run's, a wall column
// says each stage's and the total's (stages may overlap: the total is the
// run's, not their sum). It exits 1 if
// anything failed or a file cannot be read, 2 on a usage error.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = "usage: testsum stream | testsum record (-action pass|fail|skip [-reason TEXT] NAME | -exit N | -wall SECONDS) | testsum summary [-wall SECONDS] STAGE=FILE..."

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "testsum: "+usage)
		return 2
	}
	switch args[0] {
	case "stream":
		if len(args) != 1 {
			fmt.Fprintln(stderr, "testsum stream: no arguments (it reads go test -json on standard input)")
			return 2
		}
		if err := stream(stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "testsum stream: %v\n", err)
			return 1
		}
		return 0
	case "record":
		return record(args[1:], stdout, stderr)
	case "summary":
		return summary(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "testsum: unknown command %q; %s\n", args[0], usage)
	return 2
}

// record writes one event (see the package comment).
func record(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsum record", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	action := fs.String("action", "", "pass, fail or skip")
	reason := fs.String("reason", "", "why it was skipped or failed")
	exit := fs.Int("exit", -1, "the stage command's exit status")
	wall := fs.Float64("wall", -1, "the stage's wall time in seconds")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "testsum record: %v\n", err)
		return 2
	}
	var evs []event
	switch {
	case *wall >= 0:
		if *exit >= 0 || *action != "" || *reason != "" || fs.NArg() != 0 {
			fmt.Fprintln(stderr, "testsum record: -wall takes nothing else")
			return 2
		}
		evs = []event{{Action: actionWall, Output: fmt.Sprintf("%.1f", *wall)}}
	case *exit >= 0:
		if *action != "" || *reason != "" || fs.NArg() != 0 {
			fmt.Fprintln(stderr, "testsum record: -exit takes nothing else")
			return 2
		}
		evs = []event{{Action: actionExit, Output: fmt.Sprint(*exit)}}
	case *action == "pass" || *action == "fail" || *action == "skip":
		if fs.NArg() != 1 || fs.Arg(0) == "" {
			fmt.Fprintln(stderr, "testsum record: want one NAME after the flags")
			return 2
		}
		name := fs.Arg(0)
		evs = []event{{Action: "run", Test: name}}
		if *reason != "" {
			evs = append(evs, event{Action: "output", Test: name, Output: "    " + strings.ReplaceAll(*reason, "\n", " ") + "\n"})
		}
		evs = append(evs, event{Action: *action, Test: name})
	default:
		fmt.Fprintf(stderr, "testsum record: -action %q: want pass, fail or skip (or -exit N)\n", *action)
		return 2
	}
	enc := json.NewEncoder(stdout)
	for _, e := range evs {
		e.Package = recordPackage
		if err := enc.Encode(e); err != nil {
			fmt.Fprintf(stderr, "testsum record: %v\n", err)
			return 1
		}
	}
	return 0
}

// summary prints the summary of the stages (see the package comment).
func summary(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsum summary", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	total := fs.Float64("wall", -1, "the whole run's wall time in seconds")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "testsum summary: %v\n", err)
		return 2
	}
	args = fs.Args()
	if len(args) == 0 {
		fmt.Fprintln(stderr, "testsum summary: want STAGE=FILE arguments")
		return 2
	}
	var stages []*tally
	bad := false
	for _, a := range args {
		name, file, ok := strings.Cut(a, "=")
		if !ok || name == "" || file == "" {
			fmt.Fprintf(stderr, "testsum summary: %q: want STAGE=FILE\n", a)
			return 2
		}
		t := newTally(name)
		f, err := os.Open(file)
		if err != nil {
			// A stage that left no file did not run: say so, and fail.
			fmt.Fprintf(stderr, "testsum summary: stage %s: %v\n", name, err)
			t.missing = err.Error()
			bad = true
		} else {
			err = t.read(f, nil)
			f.Close()
			if err != nil {
				fmt.Fprintf(stderr, "testsum summary: stage %s: %s: %v\n", name, file, err)
				t.missing = err.Error()
				bad = true
			}
		}
		t.finish()
		stages = append(stages, t)
	}
	failed := writeSummary(stdout, stages, *total)
	if failed > 0 || bad {
		return 1
	}
	return 0
}
