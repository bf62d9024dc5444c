package countname

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tools are directories whose programs are no output of packetshaper's
// counters: their flags and JSON ("flows" of psend, of gentestdata) are
// their own words.
var tools = []string{"internal/cmd/", "scripts/"}

// names are the string constants of the package's non-test files.
func names(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]string{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[s] = vs.Names[i].Name
					}
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("%d names found in countname: the test reads the wrong files", len(out))
	}
	return out
}

// literalFiles walks the module's non-test Go files (testdata, hidden
// directories, generated files and tools aside) and returns, for each
// string of want, the files in which it is a string literal.
func literalFiles(t *testing.T, root string, want map[string]string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	found := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "testdata" || strings.HasPrefix(n, ".") || n == "vendor") {
				return filepath.SkipDir
			}
			for _, tool := range tools {
				if rel+"/" == tool {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		seen := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				return false
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && want[s] != "" && !seen[s] {
					seen[s] = true
					found[s] = append(found[s], rel)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestNamesDeclaredOnce: no counter name is a string literal in more than
// two non-test files of the module (this package's and at most one more,
// where the word is not the counter's: a verdict's name in a log line, a
// unit): every output takes the name from here. Issue 31's bar.
func TestNamesDeclaredOnce(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	want := names(t)
	found := literalFiles(t, root, want)
	var bad []string
	for s, files := range found {
		if len(files) > 2 {
			sort.Strings(files)
			bad = append(bad, strconv.Quote(s)+" ("+want[s]+") in "+strings.Join(files, ", "))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("counter name %s: use countname.%s", b, strings.SplitN(strings.SplitN(b, "(", 2)[1], ")", 2)[0])
	}
	if len(found[ShadowDropped]) == 0 {
		t.Errorf("%q found nowhere: the walk missed the module", ShadowDropped)
	}
}
