package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), with the build
// events of Go 1.24 on.
type event struct {
	Action      string  `json:"Action"`
	Package     string  `json:"Package,omitempty"`
	ImportPath  string  `json:"ImportPath,omitempty"`
	Test        string  `json:"Test,omitempty"`
	Elapsed     float64 `json:"Elapsed,omitempty"`
	Output      string  `json:"Output,omitempty"`
	FailedBuild string  `json:"FailedBuild,omitempty"`
}

const (
	// recordPackage is the package of the events record writes.
	recordPackage = "(script)"
	// actionExit is record -exit's event: the stage command's exit status.
	actionExit = "stage-exit"
	// actionWall is record -wall's event: seconds of the stage's wall
	// time (several add up).
	actionWall = "stage-wall"
	// maxOutput bounds the output kept per test or package (its end).
	maxOutput = 64 << 10
)

// result is one test's (or a failed package's) outcome.
type result struct {
	pkg, test string
	reason    string // a skip's reason, a failure's last output lines
}

func (r result) name() string {
	if r.pkg == recordPackage {
		return r.test
	}
	if r.test == "" {
		return r.pkg
	}
	return r.pkg + " " + r.test
}

type key struct{ pkg, test string }

// tally counts one stage's tests.
type tally struct {
	stage           string
	passed          int
	failed, skipped []result
	running         map[key]*strings.Builder // started, not ended: their output
	pkgOut          map[string]*strings.Builder
	pkgFailed       map[string]bool
	pkgTestFailed   map[string]bool
	buildOut        map[string]*strings.Builder // by ImportPath
	exit            string                      // record -exit's status, "" if none
	wall            float64                     // record -wall's seconds, summed
	timed           bool                        // a record -wall was read
	other           []string                    // lines that are not JSON
	missing         string                      // why the stage's file could not be read
	finished        bool
}

func newTally(stage string) *tally {
	return &tally{
		stage:         stage,
		running:       map[key]*strings.Builder{},
		pkgOut:        map[string]*strings.Builder{},
		pkgFailed:     map[string]bool{},
		pkgTestFailed: map[string]bool{},
		buildOut:      map[string]*strings.Builder{},
	}
}

// appendBounded appends s to b, keeping about the last maxOutput bytes.
func appendBounded(b *strings.Builder, s string) {
	if b.Len()+len(s) > 2*maxOutput {
		keep := b.String()
		keep = keep[len(keep)-min(len(keep), maxOutput):]
		b.Reset()
		b.WriteString(keep)
	}
	b.WriteString(s)
}

func buf(m map[string]*strings.Builder, k string) *strings.Builder {
	b := m[k]
	if b == nil {
		b = &strings.Builder{}
		m[k] = b
	}
	return b
}

// read reads go test -json from r; with live non-nil, it writes progress
// there as the events come.
func (t *tally) read(r io.Reader, live io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
			// go's own messages (a download, an error before any test).
			if strings.TrimSpace(line) != "" {
				if len(t.other) < 200 {
					t.other = append(t.other, line)
				}
				if live != nil {
					fmt.Fprintln(live, line)
				}
			}
			continue
		}
		t.event(e, live)
	}
	return sc.Err()
}

// event counts one event.
func (t *tally) event(e event, live io.Writer) {
	k := key{e.Package, e.Test}
	switch {
	case e.Action == actionExit:
		// Several commands may make one stage: the first that failed.
		if t.exit == "" || t.exit == "0" {
			t.exit = e.Output
		}
	case e.Action == actionWall:
		var sec float64
		if _, err := fmt.Sscan(e.Output, &sec); err == nil && sec >= 0 {
			t.wall += sec
			t.timed = true
		}
	case e.Action == "build-output":
		appendBounded(buf(t.buildOut, e.ImportPath), e.Output)
	case e.Action == "build-fail":
		if live != nil {
			fmt.Fprintf(live, "build failed: %s\n%s", e.ImportPath, indent(t.buildOut[e.ImportPath]))
		}
	case e.Test == "":
		t.pkgEvent(e, live)
	case e.Action == "run":
		t.running[k] = &strings.Builder{}
	case e.Action == "output":
		if b := t.running[k]; b != nil {
			appendBounded(b, e.Output)
		}
	case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
		out := ""
		if b := t.running[k]; b != nil {
			out = b.String()
		}
		delete(t.running, k)
		r := result{pkg: e.Package, test: e.Test}
		switch e.Action {
		case "pass":
			t.passed++
			if live != nil && !strings.Contains(e.Test, "/") {
				fmt.Fprintf(live, "--- PASS: %s (%.2fs)\n", r.name(), e.Elapsed)
			}
		case "skip":
			r.reason = skipReason(out)
			t.skipped = append(t.skipped, r)
			if live != nil {
				fmt.Fprintf(live, "--- SKIP: %s: %s\n", r.name(), r.reason)
			}
		case "fail":
			r.reason = lastLines(out, 5)
			t.failed = append(t.failed, r)
			t.pkgTestFailed[e.Package] = true
			if live != nil {
				fmt.Fprintf(live, "--- FAIL: %s (%.2fs)\n%s", r.name(), e.Elapsed, indentString(out))
			}
		}
	}
}

// pkgEvent counts a package's own event.
func (t *tally) pkgEvent(e event, live io.Writer) {
	switch e.Action {
	case "output":
		appendBounded(buf(t.pkgOut, e.Package), e.Output)
	case "fail":
		t.pkgFailed[e.Package] = true
		if e.FailedBuild != "" {
			appendBounded(buf(t.pkgOut, e.Package), t.buildOut[e.FailedBuild].String())
		}
		if live != nil {
			fmt.Fprintf(live, "FAIL\t%s (%.2fs)\n", e.Package, e.Elapsed)
		}
	case "pass":
		if live != nil {
			fmt.Fprintf(live, "ok\t%s (%.2fs)\n", e.Package, e.Elapsed)
		}
	}
}

// finish counts what the events left open: a test started and never
// ended (its binary died: a timeout, a panic elsewhere) failed; a package
// that failed with no test failing (a build, TestMain, the binary's exit)
// is one failure; so is an exit status that is not 0 with no failure.
func (t *tally) finish() {
	if t.finished {
		return
	}
	t.finished = true
	var open []key
	for k := range t.running {
		open = append(open, k)
	}
	sort.Slice(open, func(i, j int) bool {
		if open[i].pkg != open[j].pkg {
			return open[i].pkg < open[j].pkg
		}
		return open[i].test < open[j].test
	})
	for _, k := range open {
		// A parent whose subtest is also open ended with it: count the
		// innermost only.
		inner := false
		for _, o := range open {
			if o.pkg == k.pkg && strings.HasPrefix(o.test, k.test+"/") {
				inner = true
			}
		}
		if inner {
			continue
		}
		reason := "never ended (the test binary stopped: " + firstLine(lastLines(t.pkgOut[k.pkg].String(), 3)) + ")"
		t.failed = append(t.failed, result{pkg: k.pkg, test: k.test, reason: reason})
		t.pkgTestFailed[k.pkg] = true
	}
	var pkgs []string
	for p := range t.pkgFailed {
		if !t.pkgTestFailed[p] {
			pkgs = append(pkgs, p)
		}
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		t.failed = append(t.failed, result{pkg: p, reason: "the package failed with no failing test: " + lastLines(t.pkgOut[p].String(), 5)})
	}
	if t.exit != "" && t.exit != "0" && len(t.failed) == 0 {
		t.failed = append(t.failed, result{pkg: recordPackage, test: "(" + t.stage + " command)",
			reason: "exit status " + t.exit + " with no failing test: " + strings.Join(t.other[max(0, len(t.other)-5):], " | ")})
	}
	if t.missing != "" {
		t.failed = append(t.failed, result{pkg: recordPackage, test: "(" + t.stage + ")", reason: "no results: " + t.missing})
	}
}

// locRe matches the file:line: prefix of a t.Log or t.Skip line.
var locRe = regexp.MustCompile(`^\s*([A-Za-z0-9_.\-]+\.go:\d+): ?`)

// skipReason is a skipped test's reason: its last message (t.Skip's,
// continuation lines joined), without the framing lines.
func skipReason(out string) string {
	lines := messageLines(out)
	start := -1
	for i := len(lines) - 1; i >= 0; i-- {
		if locRe.MatchString(lines[i]) {
			start = i
			break
		}
	}
	if start < 0 {
		if len(lines) > 0 {
			return strings.TrimSpace(lines[len(lines)-1])
		}
		return "(no reason given)"
	}
	m := locRe.FindStringSubmatch(lines[start])
	parts := []string{strings.TrimSpace(lines[start][len(m[0]):])}
	for _, l := range lines[start+1:] {
		parts = append(parts, strings.TrimSpace(l))
	}
	msg := strings.Join(parts, " ")
	if msg == "" {
		msg = "(no reason given)"
	}
	return msg + " (" + m[1] + ")"
}

// messageLines is out's lines as they are, less the blank and the framing
// ones (=== and --- lines).
func messageLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// lastLines is the last n non-framing lines of out, joined by " | ".
func lastLines(out string, n int) string {
	var lines []string
	for _, l := range messageLines(out) {
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func firstLine(s string) string {
	if s == "" {
		return "no output"
	}
	l, _, _ := strings.Cut(s, " | ")
	return l
}

func indentString(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func indent(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return indentString(b.String())
}

// stream reads go test -json from r and writes progress to w.
func stream(r io.Reader, w io.Writer) error {
	t := newTally("")
	return t.read(r, w)
}

// writeSummary writes the summary of the stages and returns how many
// tests failed in all.
// A wall column is written when a stage recorded its wall time or total
// (the whole run's, in seconds) is not negative; a stage without one shows
// "-" there.
func writeSummary(w io.Writer, stages []*tally, total float64) int {
	var passed, failed, skipped int
	timed := total >= 0
	for _, t := range stages {
		timed = timed || t.timed
	}
	wall := func(ok bool, sec float64) string {
		switch {
		case !timed:
			return ""
		case !ok:
			return fmt.Sprintf(" %8s", "-")
		}
		return fmt.Sprintf(" %7.0fs", sec)
	}
	fmt.Fprintln(w, "== summary")
	head := ""
	if timed {
		head = fmt.Sprintf(" %8s", "wall")
	}
	fmt.Fprintf(w, "%-10s %8s %8s %8s%s\n", "stage", "passed", "failed", "skipped", head)
	for _, t := range stages {
		note := ""
		if t.missing != "" {
			note = "  (did not run: " + t.missing + ")"
		}
		fmt.Fprintf(w, "%-10s %8d %8d %8d%s%s\n", t.stage, t.passed, len(t.failed), len(t.skipped), wall(t.timed, t.wall), note)
		passed += t.passed
		failed += len(t.failed)
		skipped += len(t.skipped)
	}
	fmt.Fprintf(w, "%-10s %8d %8d %8d%s\n", "total", passed, failed, skipped, wall(total >= 0, total))
	if skipped > 0 {
		fmt.Fprintf(w, "\nskipped (%d):\n", skipped)
		for _, t := range stages {
			for _, r := range t.skipped {
				fmt.Fprintf(w, "  %s: %s: %s\n", t.stage, r.name(), r.reason)
			}
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "\nfailed (%d):\n", failed)
		for _, t := range stages {
			for _, r := range t.failed {
				fmt.Fprintf(w, "  %s: %s: %s\n", t.stage, r.name(), r.reason)
			}
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return failed
}
