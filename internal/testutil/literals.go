package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Literals reads the module's non-test Go files below root (testdata,
// vendor and hidden directories, generated files and the directories of
// skip, slash-separated and relative to root, aside) and returns each
// file's string literals as written (quoted; struct tags too), by its path
// relative to root: for the tests that hold a name to be spelled in few
// files.
func Literals(t testing.TB, root string, skip ...string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	lits := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			n := d.Name()
			if p != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			for _, s := range skip {
				if rel == strings.TrimSuffix(s, "/") {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if _, ok := n.(*ast.ImportSpec); ok {
				return false
			}
			if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
				lits[rel] = append(lits[rel], l.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lits
}
