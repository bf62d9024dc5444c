package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayConntrack: a ct-state rule turns replay's connection tracker
// on: the summary says what it gave and where a capture may make it differ
// from the kernel's; a mark match is warned of (a capture holds no marks);
// a policy without either gets neither line.
func TestReplayConntrack(t *testing.T) {
	pol := writeFile(t, "p.toml", `
[[rule]]
name  = "new-udp"
match = { proto = ["udp"], ct-state = ["new"] }
pps   = 1000

[[rule]]
name   = "marked"
match  = { mark = "0x1/0x1" }
action = "drop"
`)
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--policy", pol, filepath.Join(testdata, "policy-mix.pcapng")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	wantLines(t, "summary", stdout.String(),
		"conntrack  new 280, established 240, related 0, invalid 0 (replay's tracker, for ct-state matches)",
		"where the kernel may differ: 5 TCP packets of connections the capture does not open",
		"6 conversations seen one way only")
	if want := `warning: rule(s) marked match marks: a capture holds none, every replayed packet has mark 0`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q: %q", want, stderr.String())
	}
	// The report says it too.
	rep := filepath.Join(t.TempDir(), "r.html")
	stdout.Reset()
	if code := runReplayArgs([]string{"--policy", pol, "--report", rep, filepath.Join(testdata, "policy-mix.pcapng")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if b, err := os.ReadFile(rep); err != nil || !strings.Contains(string(b), "conversations seen one way only") || !strings.Contains(string(b), "280 / 240 / 0 / 0") {
		t.Errorf("the report lacks the tracker's counts (%v)", err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := runReplayArgs([]string{"--pps", "10", filepath.Join(testdata, "policy-mix.pcapng")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "conntrack") || stderr.Len() != 0 {
		t.Errorf("without ct-state or mark matches: %s%s", stdout.String(), stderr.String())
	}
}
