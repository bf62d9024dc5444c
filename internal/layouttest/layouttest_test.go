package layouttest

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"testing"
)

// TestNoFileOverMaxLines keeps every non-test Go file of the module, in
// every package, under MaxLines lines (issue 18): a file that grows past
// it is split along its jobs.
func TestNoFileOverMaxLines(t *testing.T) {
	root := ModuleRoot(t)
	files := SourceFiles(t)
	for _, name := range files {
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > MaxLines {
			t.Errorf("%s: %d lines, more than %d: split it along its jobs", name, n, MaxLines)
		}
	}
	t.Logf("%d non-test Go files checked", len(files))
}

// maxWiringLines bounds the non-test lines of cmd/packetshaper (issue 31):
// the command is flag wiring and calls; what it prints and decides lives
// in packages (replay's JSON and summary, control's tables, clihelp's
// help), its long help in help/*.txt.
const maxWiringLines = 1300

// TestCmdIsWiring holds cmd/packetshaper to maxWiringLines non-test lines.
func TestCmdIsWiring(t *testing.T) {
	root := ModuleRoot(t)
	n, files := 0, 0
	for _, name := range SourceFiles(t) {
		if path.Dir(name) != "cmd/packetshaper" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(src, []byte("\n"))
		files++
	}
	if files == 0 {
		t.Fatal("no file of cmd/packetshaper read")
	}
	if n > maxWiringLines {
		t.Errorf("cmd/packetshaper: %d non-test lines in %d files, more than %d: move what is not flag wiring into the package it serves", n, files, maxWiringLines)
	}
	t.Logf("cmd/packetshaper: %d non-test lines", n)
}
