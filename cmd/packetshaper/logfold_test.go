package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestFold: a log line longer than the terminal is wrapped at spaces, its
// continuation lines indented, nothing lost; short lines pass as they are.
func TestFold(t *testing.T) {
	var words []string
	for i := range 120 {
		words = append(words, "rule.web.k"+strings.Repeat("x", i%7)+"=1")
	}
	long := "time=2026-12-02T03:00:00Z level=INFO msg=\"final stats\" " + strings.Join(words, " ")
	var out bytes.Buffer
	f := &foldWriter{w: &out, width: 80}
	if _, err := f.Write([]byte(long + "\nshort line\n")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 10 || lines[len(lines)-1] != "short line" {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	var back []string
	for i, l := range lines[:len(lines)-1] {
		if len(l) > 80 {
			t.Errorf("line %d is %d columns, want at most 80: %q", i, len(l), l)
		}
		if i > 0 && !strings.HasPrefix(l, foldIndent) {
			t.Errorf("continuation line %d not indented: %q", i, l)
		}
		back = append(back, strings.TrimPrefix(l, foldIndent))
	}
	if got := strings.Join(back, " "); got != long {
		t.Errorf("unwrapped, the line differs:\n got %q\nwant %q", got, long)
	}
	// A word longer than the width stays whole.
	out.Reset()
	f.Write([]byte(strings.Repeat("y", 100) + " z\n"))
	if out.String() != strings.Repeat("y", 100)+"\n"+foldIndent+"z\n" {
		t.Errorf("a long word: %q", out.String())
	}
}
