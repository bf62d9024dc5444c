// Command timingtests lists the tests that check a timing figure with
// internal/timing's Check, directly or through a helper of their package,
// one line per package:
//
//	./nfq TestCleanStop|TestWake
//
// scripts/bench.sh's timing part runs exactly these with PS_STRICT_TIMING=1,
// so a test that gains a timing.Check is enforced there without a list to
// keep. Run from the module's root: go run ./scripts/timingtests.
//
// A call counts by the callee's name (a function, or a method of any type):
// two helpers of one name in a package both count, which can only add a
// test, never drop one.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	lines, err := list(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "timingtests:", err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// list walks the module under root and returns one "./dir Test1|Test2"
// line per package directory with such tests (dir relative to root),
// sorted.
func list(root string) ([]string, error) {
	byDir := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for dir, files := range byDir {
		tests, err := timed(files)
		if err != nil {
			return nil, err
		}
		if len(tests) > 0 {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return nil, err
			}
			out = append(out, "./"+filepath.ToSlash(rel)+" "+strings.Join(tests, "|"))
		}
	}
	sort.Strings(out)
	return out, nil
}

// timed returns the sorted names of the Test functions in files that reach
// timing.Check through the package's own functions.
func timed(files []string) ([]string, error) {
	fset := token.NewFileSet()
	calls := map[string]map[string]bool{} // function or method name -> names it calls
	checks := map[string]bool{}           // calls timing.Check itself
	var tests []string
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range af.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv == nil && strings.HasPrefix(name, "Test") {
				tests = append(tests, name)
			}
			if calls[name] == nil {
				calls[name] = map[string]bool{}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch e := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := e.X.(*ast.Ident); ok && x.Name == "timing" && e.Sel.Name == "Check" {
						checks[name] = true
					}
					calls[name][e.Sel.Name] = true
				case *ast.Ident:
					// A call, or a function passed as a value
					// (t.Run(name, helper)).
					calls[name][e.Name] = true
				}
				return true
			})
		}
	}
	// Fixed point: a function calling one that reaches Check reaches it.
	for changed := true; changed; {
		changed = false
		for fn, callees := range calls {
			if checks[fn] {
				continue
			}
			for c := range callees {
				if checks[c] {
					checks[fn] = true
					changed = true
					break
				}
			}
		}
	}
	var out []string
	for _, t := range tests {
		if checks[t] {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}
