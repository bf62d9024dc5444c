package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFastpath: check --fastpath says, one line per rule on stderr,
// where each rule would run and why; stdout stays the printed policy, the
// same as without the flag.
func TestCheckFastpath(t *testing.T) {
	const file = `
[[rule]]
name = "tb"
match.proto = ["udp"]
key = "src"
pps = 100
burst = 10

[[rule]]
name = "shaped"
match.proto = ["tcp"]
pps = 100
shape = true

[[rule]]
name = "log"
algo = "sliding-window"
pps = 100
`
	pol := writeFile(t, "p.toml", file)
	var plain, plainErr bytes.Buffer
	if code := run([]string{"check", pol}, &plain, &plainErr); code != 0 {
		t.Fatalf("check: %d %s", code, plainErr.String())
	}
	if strings.Contains(plainErr.String(), "fastpath") {
		t.Errorf("check without --fastpath talks of the fast path: %q", plainErr.String())
	}
	var out, errb bytes.Buffer
	if code := run([]string{"check", "--fastpath", pol}, &out, &errb); code != 0 {
		t.Fatalf("check --fastpath: %d %s", code, errb.String())
	}
	if out.String() != plain.String() {
		t.Errorf("check --fastpath changed stdout:\n%s\nwant\n%s", out.String(), plain.String())
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if strings.HasPrefix(l, "packetshaper check: fastpath: ") {
			lines = append(lines, l)
		}
	}
	want := []string{`rule "tb": kernel`, `rule "shaped": user space: it shapes`, `rule "log": user space: the sliding-window log`}
	if len(lines) != len(want) {
		t.Fatalf("check --fastpath: %d fastpath lines, want %d:\n%s", len(lines), len(want), errb.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %q lacks %q", i, lines[i], w)
		}
	}
	// A bad file: the one-line error, exit 2, no split.
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("[[rule]]\nname = 3\n"), 0o644)
	errb.Reset()
	if code := run([]string{"check", "--fastpath", bad}, &out, &errb); code != 2 || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("check --fastpath of a bad file: %d %q, want 2 and one line", code, errb.String())
	}
}
