package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runSum runs testsum with args and stdin, returning its exit status,
// standard output and standard error.
func runSum(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// writeFile writes s to a file in a temporary directory and returns its path.
func writeFile(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// records runs testsum with each args (record commands that must succeed)
// and returns their output, one stage's file.
func records(t *testing.T, runs ...[]string) string {
	t.Helper()
	var stage strings.Builder
	for _, args := range runs {
		code, out, errs := runSum(t, "", args...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		stage.WriteString(out)
	}
	return stage.String()
}

// summarize runs testsum summary with args, fails t unless it exits
// with code, and returns its output.
func summarize(t *testing.T, code int, args ...string) string {
	t.Helper()
	got, out, errs := runSum(t, "", append([]string{"summary"}, args...)...)
	if got != code {
		t.Fatalf("summary %v: exit %d, want %d\n%s%s", args, got, code, out, errs)
	}
	return out
}

// wantIn fails t for each of wants that out (what: the summary, the
// stream output) lacks.
func wantIn(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return l[len(l)-1]
}

// A stage as go test -json writes it: a pass, a subtest skipped with a
// two-line reason, a failure, a test that never ended (its binary timed
// out), a package that failed to build and one without test files.
const stageJSON = `{"Action":"start","Package":"ex/a"}
{"Action":"run","Package":"ex/a","Test":"TestPass"}
{"Action":"output","Package":"ex/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"ex/a","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"ex/a","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"ex/a","Test":"TestParent"}
{"Action":"run","Package":"ex/a","Test":"TestParent/sub"}
{"Action":"output","Package":"ex/a","Test":"TestParent/sub","Output":"    a_test.go:9: a log line first\n"}
{"Action":"output","Package":"ex/a","Test":"TestParent/sub","Output":"    a_test.go:12: not root: the netns tests need root\n"}
{"Action":"output","Package":"ex/a","Test":"TestParent/sub","Output":"        (run as root)\n"}
{"Action":"output","Package":"ex/a","Test":"TestParent/sub","Output":"    --- SKIP: TestParent/sub (0.00s)\n"}
{"Action":"skip","Package":"ex/a","Test":"TestParent/sub","Elapsed":0}
{"Action":"pass","Package":"ex/a","Test":"TestParent","Elapsed":0}
{"Action":"run","Package":"ex/a","Test":"TestFail"}
{"Action":"output","Package":"ex/a","Test":"TestFail","Output":"    a_test.go:20: lateness p99 399 us, want <= 200 us\n"}
{"Action":"fail","Package":"ex/a","Test":"TestFail","Elapsed":0.1}
{"Action":"output","Package":"ex/a","Output":"FAIL\n"}
{"Action":"fail","Package":"ex/a","Elapsed":0.2}
{"Action":"run","Package":"ex/b","Test":"TestHang"}
{"Action":"run","Package":"ex/b","Test":"TestHang/inner"}
{"Action":"output","Package":"ex/b","Output":"panic: test timed out after 1s\n"}
{"Action":"fail","Package":"ex/b","Elapsed":1}
{"ImportPath":"ex/c [ex/c.test]","Action":"build-output","Output":"c_test.go:3:1: syntax error\n"}
{"ImportPath":"ex/c [ex/c.test]","Action":"build-fail"}
{"Action":"start","Package":"ex/c"}
{"Action":"output","Package":"ex/c","Output":"FAIL\tex/c [build failed]\n"}
{"Action":"fail","Package":"ex/c","Elapsed":0,"FailedBuild":"ex/c [ex/c.test]"}
{"Action":"skip","Package":"ex/d","Elapsed":0}
`

func TestSummary(t *testing.T) {
	unit := writeFile(t, "unit.json", stageJSON)
	code, out, errs := runSum(t, "", "summary", "unit="+unit)
	if code != 1 {
		t.Errorf("exit %d, want 1 (failures)\n%s%s", code, out, errs)
	}
	// TestPass, TestParent pass; TestParent/sub skipped; TestFail,
	// TestHang/inner (never ended) and ex/c (its build) failed.
	wantIn(t, "summary", out,
		"unit              2        3        1\n",
		"total             2        3        1\n",
		"unit: ex/a TestParent/sub: not root: the netns tests need root (run as root) (a_test.go:12)\n",
		"unit: ex/a TestFail: a_test.go:20: lateness p99 399 us, want <= 200 us\n",
		"unit: ex/b TestHang/inner: never ended (the test binary stopped: panic: test timed out after 1s)\n",
		"unit: ex/c: the package failed with no failing test: ",
		"c_test.go:3:1: syntax error")
	if strings.Contains(out, "TestHang:") || strings.Contains(out, "ex/d") {
		t.Errorf("summary counts an open parent or a package without tests:\n%s", out)
	}
	if l := lastLine(out); l != "2 passed, 3 failed, 1 skipped" {
		t.Errorf("last line %q", l)
	}
}

// record's events count as tests of their stage; an exit status that is
// not 0 with nothing failed is a failure; a missing stage file is one too.
func TestRecordAndExit(t *testing.T) {
	ok := writeFile(t, "ok.json", records(t,
		[]string{"record", "-action", "pass", "go vet ./..."},
		[]string{"record", "-action", "skip", "-reason", "not root: it installs the package", "scripts/package-test.sh"},
		[]string{"record", "-exit", "0"}))
	code, out, _ := runSum(t, "", "summary", "vet="+ok)
	if code != 0 || lastLine(out) != "1 passed, 0 failed, 1 skipped" ||
		!strings.Contains(out, "vet: scripts/package-test.sh: not root: it installs the package\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}

	_, exit1, _ := runSum(t, "", "record", "-exit", "1")
	bad := writeFile(t, "bad.json", "go: updates to go.mod needed\n"+exit1)
	code, out, _ = runSum(t, "", "summary", "vet="+ok, "unit="+bad, "fuzz="+filepath.Join(t.TempDir(), "none.json"))
	if code != 1 || lastLine(out) != "1 passed, 2 failed, 1 skipped" ||
		!strings.Contains(out, "unit: (unit command): exit status 1 with no failing test: go: updates to go.mod needed\n") ||
		!strings.Contains(out, "fuzz: (fuzz): no results: ") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"stream", "x"},
		{"record"},
		{"record", "-action", "maybe", "x"},
		{"record", "-action", "pass"},
		{"record", "-exit", "1", "x"},
		{"summary"},
		{"summary", "nofile"},
	} {
		code, out, errs := runSum(t, "", args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "testsum") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
	}
}

func TestStream(t *testing.T) {
	code, out, _ := runSum(t, "go: downloading example.com/x v1.0.0\n"+stageJSON, "stream")
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	wantIn(t, "stream output", out,
		"go: downloading example.com/x v1.0.0\n",
		"--- PASS: ex/a TestPass (0.00s)\n",
		"--- SKIP: ex/a TestParent/sub: not root",
		"--- FAIL: ex/a TestFail (0.10s)\n        a_test.go:20: lateness p99 399 us",
		"FAIL\tex/a",
		"build failed: ex/c [ex/c.test]\n    c_test.go:3:1: syntax error\n",
	)
}

// TestRealGoTest runs go test -json on a small module of its own and
// checks the summary against what it holds: 3 passed (a test, a fuzz
// target and its seed as a subtest), 1 failed, 2 skipped (one with t.Skipf,
// one with SkipNow), and a package that does not build.
func TestRealGoTest(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH: %v", err)
	}
	dir := t.TempDir()
	// The test functions indented, so that scripts/test.sh, which finds
	// fuzz targets as lines starting "func Fuzz" in test files, does not
	// take this file's for its own.
	files := map[string]string{
		"go.mod": "module ex\n\ngo 1.22\n",
		"a/a_test.go": `package a

import "testing"

	func TestPass(t *testing.T) {}
	func TestSkip(t *testing.T) { t.Skipf("no shared captures (%s)", "open ../shared: no such file") }
	func TestSkipNow(t *testing.T) { t.SkipNow() }
	func TestFail(t *testing.T) { t.Error("want 1, got 2") }
	func FuzzSeeds(f *testing.F) { f.Add(1); f.Fuzz(func(t *testing.T, n int) {}) }
`,
		"b/b_test.go": "package b\n\nfunc broken( {\n",
	}
	for name, s := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(gobin, "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	js, err := cmd.Output()
	if err == nil {
		t.Fatalf("go test passed a failing module:\n%s", js)
	}
	f := writeFile(t, "unit.json", string(js))
	code, out, _ := runSum(t, "", "summary", "unit="+f)
	if code != 1 || lastLine(out) != "3 passed, 2 failed, 2 skipped" {
		t.Errorf("exit %d, want 1 and 3 passed, 2 failed (TestFail, b's build), 2 skipped:\n%s\ngo test -json:\n%s", code, out, js)
	}
	wantIn(t, "summary", out,
		"unit: ex/a TestSkip: no shared captures (open ../shared: no such file) (a_test.go:6)\n",
		"unit: ex/a TestSkipNow: (no reason given)\n",
		"unit: ex/a TestFail: a_test.go:8: want 1, got 2\n",
		"unit: ex/b: the package failed with no failing test: ",
	)
}

// record -wall gives a stage its wall time (several records add up) and
// summary -wall the run's: a wall column, "-" for a stage without one.
func TestWall(t *testing.T) {
	vet := writeFile(t, "vet.json", records(t,
		[]string{"record", "-action", "pass", "go vet ./..."},
		[]string{"record", "-wall", "12.4"},
		[]string{"record", "-wall", "30"}))
	unit := writeFile(t, "unit.json", `{"Action":"skip","Package":"ex/d","Elapsed":0}`+"\n")
	out := summarize(t, 0, "-wall", "50", "vet="+vet, "unit="+unit)
	wantIn(t, "summary", out,
		"stage        passed   failed  skipped     wall\n",
		"vet               1        0        0      42s\n",
		"unit              0        0        0        -\n",
		"total             1        0        0      50s\n")
	if l := lastLine(out); l != "1 passed, 0 failed, 0 skipped" {
		t.Errorf("last line %q", l)
	}
	if code, _, _ := runSum(t, "", "record", "-wall", "1", "-exit", "0"); code != 2 {
		t.Errorf("record -wall -exit: exit %d, want 2", code)
	}
}
