// Package layouttest checks, from a package's tests, that its Go files
// (tests aside) stay under a size and import nothing they must not; its
// own tests check the whole module: no non-test Go file over MaxLines
// lines, no error-string surgery, no fmt.Errorf that loses an error's
// chain.
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

// MaxLines is the most lines a non-test Go file of the module may have
// (TestNoFileOverMaxLines): past it, split the file along its jobs.
const MaxLines = 700

// ModuleRoot returns the directory of the module's go.mod, found from the
// current directory (a package's, under go test) upwards.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the current directory")
		}
		dir = up
	}
}

// SourceFiles returns every non-test Go file of the module, as paths
// relative to its root (slash-separated, sorted), leaving out testdata
// directories and those whose name starts with "." or "_", as the go
// command does.
func SourceFiles(t testing.TB) []string {
	t.Helper()
	root := ModuleRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", root)
	}
	return files
}
