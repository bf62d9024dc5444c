package layouttest

import (
	"bytes"
	"os"
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
