package layouttest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestNoErrorStringSurgery checks that no non-test Go file of the module
// takes errors apart by their text (issue 18): no prefix or suffix
// stripped from, tested on or searched in an error's message (Error(), a
// Msg field, a msg made of one), and no package prefix ("shaper: ",
// "global: ", ...) written as a literal to strip. Errors carry their
// field and problem as types (shaper.ConfigError, policy.Error,
// control.ListenError, global.ConfigError) and callers use errors.As/Is.
func TestNoErrorStringSurgery(t *testing.T) {
	surgery := regexp.MustCompile(`(TrimPrefix|HasPrefix|CutPrefix|TrimSuffix|HasSuffix|CutSuffix|Contains|Index)\([^)]*(\.Msg\b|Error\(\)|\bmsg\b)` +
		`|"(shaper|flows|policy|global|control socket|control|daemon|nfq|replay): "`)
	root := ModuleRoot(t)
	for _, name := range SourceFiles(t) {
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := surgery.FindString(line); m != "" && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d: error-string surgery: %s", name, i+1, m)
			}
		}
	}
}

// errName is what an error value is called in this module: err, cerr,
// writeErr, pe.Err.
var errName = regexp.MustCompile(`^([a-z]*[eE]rr|Err)$`)

// TestErrorfKeepsChain checks that no fmt.Errorf in the module's non-test
// code formats an error (a variable or field named err, xerr, xErr or
// Err) with %v or %s, which keeps its text and loses its chain: %w keeps
// both (several %w are allowed), so callers can use errors.Is/As.
func TestErrorfKeepsChain(t *testing.T) {
	root := ModuleRoot(t)
	fset := token.NewFileSet()
	for _, name := range SourceFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isFmtErrorf(call.Fun) || len(call.Args) < 2 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			format, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for i, verb := range verbs(format) {
				if i+1 >= len(call.Args) || verb == 'w' {
					continue
				}
				if id := argName(call.Args[i+1]); id != "" && errName.MatchString(id) {
					t.Errorf("%s: fmt.Errorf formats the error %s with %%%c: use %%w", fset.Position(call.Pos()), id, verb)
				}
			}
			return true
		})
	}
}

func isFmtErrorf(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Errorf" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "fmt"
}

// argName is the name of an identifier or the field of a selector, "" for
// any other expression.
func argName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// verbs returns the verb of each argument format consumes, in order (a *
// width or precision consumes one too, given as '*').
func verbs(format string) []rune {
	var vs []rune
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format); i++ {
			c := format[i]
			if c == '*' {
				vs = append(vs, '*')
				continue
			}
			if strings.IndexByte("+-# 0123456789.[]", c) >= 0 {
				continue
			}
			if c != '%' {
				vs = append(vs, rune(c))
			}
			break
		}
	}
	return vs
}

func TestVerbs(t *testing.T) {
	if got := string(verbs("a %d%% %-*s %w %v")); got != "d*swv" {
		t.Errorf("verbs: %q, want d*swv", got)
	}
}
