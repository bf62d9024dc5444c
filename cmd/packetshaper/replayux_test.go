package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayShadowPerFlow: replay's per_flow (--json) and its summary's
// top flows count a shadow rule's packets over the limit as shadow-dropped,
// not dropped, as its rule row does: per rule, per_flow adds up to the
// rule's shadow_dropped and has no drops of its own.
func TestReplayShadowPerFlow(t *testing.T) {
	args := []string{"--policy", filepath.Join(testdata, "policy-mix.toml"), filepath.Join(testdata, "policy-mix.pcapng")}
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs(append([]string{"--json"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	type sums struct{ dropped, shadow uint64 }
	perRule := map[string]sums{}
	for _, f := range rep.PerFlow {
		s := perRule[f.Rule]
		s.dropped += f.Dropped
		s.shadow += f.ShadowDropped
		perRule[f.Rule] = s
		if f.Packets != f.Accepted+f.Dropped {
			t.Errorf("flow %s: packets %d != accepted %d + dropped %d", f.Flow, f.Packets, f.Accepted, f.Dropped)
		}
	}
	shadowRules := 0
	for _, ru := range rep.Rules {
		if ru.ShadowDropped == 0 {
			continue
		}
		shadowRules++
		if got := perRule[ru.Name]; got != (sums{0, ru.ShadowDropped}) || ru.Dropped != 0 {
			t.Errorf("shadow rule %s: dropped %d, shadow_dropped %d; per_flow's %d, %d: want per_flow dropped 0 and the same shadow_dropped",
				ru.Name, ru.Dropped, ru.ShadowDropped, got.dropped, got.shadow)
		}
	}
	if shadowRules == 0 {
		t.Fatal("policy-mix has no shadow drops")
	}
	// The summary: the shadow rule's flows have DROPPED 0 and their
	// SHADOWDROP.
	stdout.Reset()
	if code := runReplayArgs(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "flows with the most drops (then shadow drops, marks):\n  DROPPED SHADOWDROP     MARKED") &&
		!strings.Contains(out, "   DROPPED SHADOWDROP     MARKED    PACKETS") {
		t.Errorf("summary lacks the top flows' header with SHADOWDROP and MARKED:\n%s", out)
	}
	want := "           0         26          0         40  web-trial            tcp 198.51.100.7:40000 > 10.0.1.1:80"
	if !strings.Contains(out, want) {
		t.Errorf("summary lacks the shadow flow as %q:\n%s", want, out)
	}
}

// TestReplayNotACapture: replay of a file that is no capture prints only
// its error, one line, and no zero-packet summary (nor JSON); --report
// says where it wrote, one line on stderr, also then.
func TestReplayNotACapture(t *testing.T) {
	dir := t.TempDir()
	notCap := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notCap, []byte("this is not a capture, just some text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--json"}} {
		var stdout, stderr bytes.Buffer
		code := runReplayArgs(append(append([]string{"--pps", "10"}, extra...), notCap), &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 1 || stdout.Len() != 0 || len(lines) != 1 || !strings.Contains(lines[0], "notes.txt") {
			t.Errorf("replay %v of a text file: exit %d, stdout %q, stderr %q; want 1, nothing on stdout, one line naming the file", extra, code, stdout.String(), stderr.String())
		}
	}
	// --report on a good capture: where it wrote, one line.
	rp := filepath.Join(dir, "r.html")
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--pps", "10", "--report", rp, filepath.Join(testdata, "multiflow.pcap")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got, want := stderr.String(), "packetshaper replay: report written to "+rp+"\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if fi, err := os.Stat(rp); err != nil || fi.Size() == 0 {
		t.Errorf("the report: %v", err)
	}
}
