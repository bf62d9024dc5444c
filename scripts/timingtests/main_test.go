package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestList: a test that calls timing.Check, one that reaches it through a
// helper method and a closure, and one that does not; a package without
// any is not listed.
func TestList(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/a_test.go", `package a
func TestDirect(t *testing.T) { timing.Check(t, true, "x") }
func TestThroughHelper(t *testing.T) { var h helper; t.Run("x", func(t *testing.T) { h.stop() }) }
func TestNone(t *testing.T) { other() }
type helper struct{}
func (helper) stop() { wait() }
func wait() { timing.Check(nil, true, "y") }
func other() {}
`)
	write("b/b_test.go", `package b
func TestNothing(t *testing.T) {}
`)
	write("a/testdata/c_test.go", `package c
func TestIgnored(t *testing.T) { timing.Check(t, true, "x") }
`)
	got, err := list(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"./a TestDirect|TestThroughHelper"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("list = %q, want %q", got, want)
	}
}

// TestListModule: the module's own timing tests include one that checks
// directly (nfq's TestWake) and one that checks only through the e2e
// harness's stopShaper (TestLimitTokenBucket).
func TestListModule(t *testing.T) {
	got, err := list("../..")
	if err != nil {
		t.Fatal(err)
	}
	has := func(dir, test string) bool {
		for _, l := range got {
			if d, ts, _ := strings.Cut(l, " "); d == "./"+dir && slices.Contains(strings.Split(ts, "|"), test) {
				return true
			}
		}
		return false
	}
	for _, c := range [][2]string{{"nfq", "TestWake"}, {"e2e", "TestLimitTokenBucket"}, {"internal/global", "TestFallbackAndReturn"}} {
		if !has(c[0], c[1]) {
			t.Errorf("%s %s not listed:\n%q", c[0], c[1], got)
		}
	}
}
