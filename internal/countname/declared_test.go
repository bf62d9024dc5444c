package countname

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testutil"
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

// spells reports whether the literal l (as written) spells name: is it,
// or, for a name with an underscore (no word of prose), is a struct tag
// naming it (`json:"name"`, `json:"name,omitempty"`).
func spells(l, name string) bool {
	if v, err := strconv.Unquote(l); err == nil && v == name {
		return true
	}
	return strings.Contains(name, "_") && strings.HasPrefix(l, "`") &&
		(strings.Contains(l, `:"`+name+`"`) || strings.Contains(l, `:"`+name+`,`))
}

// TestNamesDeclaredOnce: no counter name is a string literal in more than
// two non-test files of the module (this package's and at most one more:
// for a plain word, where it is not the counter's, a verdict in a log
// line, a unit; for a name with an underscore, control's JSON tags, which
// cannot take a constant): every output takes the name from here. Issue
// 31's bar. (daemon's TestCounterNamesOnce holds the daemon's own keys,
// max_held and failopen's, alike.)
func TestNamesDeclaredOnce(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	lits := testutil.Literals(t, root, tools...)
	want := names(t)
	var sorted []string
	for s := range want {
		sorted = append(sorted, s)
	}
	slices.Sort(sorted)
	for _, name := range sorted {
		var in []string
		for file, ls := range lits {
			if slices.ContainsFunc(ls, func(l string) bool { return spells(l, name) }) {
				in = append(in, file)
			}
		}
		if name == ShadowDropped && len(in) == 0 {
			t.Errorf("%q found nowhere: the walk missed the module", name)
		}
		if len(in) > 2 {
			slices.Sort(in)
			t.Errorf("counter name %q is spelled in %d files, %s: use countname.%s", name, len(in), strings.Join(in, ", "), want[name])
		}
	}
}
