package daemon

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the package may be (its
// non-test files): the daemon is a lifecycle of small steps (lifecycle.go),
// not one long function whose order of defers matters.
const maxFuncLines = 80

// sources parses the package's non-test files, those of every platform.
func sources(t *testing.T, fset *token.FileSet) []*ast.File {
	t.Helper()
	bp, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	// IgnoredGoFiles: the other platforms' (and their tests).
	names := slices.DeleteFunc(append(bp.GoFiles, bp.IgnoredGoFiles...), func(n string) bool { return strings.HasSuffix(n, "_test.go") })
	var files []*ast.File
	for _, f := range names {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	return files
}

// TestFuncLength holds every function of the package's non-test files to
// maxFuncLines lines, from its declaration to its closing brace.
func TestFuncLength(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, file := range sources(t, fset) {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n++
			if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > maxFuncLines {
				t.Errorf("%s: func %s is %d lines, over %d: split it", fset.Position(fd.Pos()), fd.Name.Name, lines, maxFuncLines)
			}
		}
	}
	if n < 50 {
		t.Fatalf("read %d functions: the package has more", n)
	}
}

// TestNoKernelObjects: the daemon holds no eBPF object and makes no tc
// call: the fast path's programs, maps and links are internal/fastpath's
// (fastpath.AttachTo, Link.UpdateTo, PuntAll).
func TestNoKernelObjects(t *testing.T) {
	fset := token.NewFileSet()
	for _, file := range sources(t, fset) {
		for _, imp := range file.Imports {
			for _, no := range []string{`"github.com/cilium/ebpf`, `"github.com/vishvananda/netlink`} {
				if strings.HasPrefix(imp.Path.Value, no) {
					t.Errorf("%s imports %s: the fast path's kernel objects belong to internal/fastpath", fset.Position(imp.Pos()), imp.Path.Value)
				}
			}
		}
	}
}
