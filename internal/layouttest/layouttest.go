// Package layouttest checks, from a package's tests, that its Go files
// (tests aside) stay under a size and import nothing they must not.
package layouttest

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Check fails t for every non-test Go file of the current directory (the
// package under test) longer than maxLines lines, and for every import
// path that forbid answers with a reason (forbid returns "" for an allowed
// one).
func Check(t testing.TB, maxLines int, forbid func(path string) string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > maxLines {
			t.Errorf("%s: %d lines, more than %d: split it along its jobs", name, n, maxLines)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why := forbid(path); why != "" {
				t.Errorf("%s imports %s: %s", name, path, why)
			}
		}
	}
}
