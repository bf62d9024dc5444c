package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayMaxHeldFlag: --max-held takes live's range, and bounds what
// shaping rules hold: with 0 none is held, so every packet a shaping rule
// would delay is dropped, uncharged (shape_overflow): a shaping bucket of
// burst 1 then passes what a policing one does.
func TestReplayMaxHeldFlag(t *testing.T) {
	for _, bad := range []string{"-1", "16385"} {
		var stdout, stderr bytes.Buffer
		code := runReplayArgs([]string{"--pps", "10", "--shape", "--max-held", bad, filepath.Join(testdata, "multiflow.pcap")}, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--max-held must be between 0 and 16384, not "+bad) {
			t.Errorf("--max-held %s: exit %d, stderr %q; want 2 and the range", bad, code, stderr.String())
		}
	}
	run := func(args ...string) jsonReport {
		var stdout, stderr bytes.Buffer
		args = append([]string{"--json", "--pps", "10", "--burst", "1"}, args...)
		if code := runReplayArgs(append(args, filepath.Join(testdata, "multiflow.pcap")), &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var rep jsonReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	def := run("--shape", "--max-delay", "500ms")
	none := run("--shape", "--max-delay", "500ms", "--max-held", "0")
	police := run()
	if def.Delayed == 0 {
		t.Fatalf("nothing delayed by default: %+v", def)
	}
	// Held nothing, a shaping token bucket of burst 1 passes what arrives
	// conforming, and drops the rest uncharged: it polices.
	if none.Delayed != 0 || none.ShapeOverflow != none.Dropped || none.Accepted != police.Accepted {
		t.Errorf("--max-held 0: accepted %d, delayed %d, shape_overflow %d of %d dropped; want %d accepted (the policing bucket's), none delayed, every drop an overflow",
			none.Accepted, none.Delayed, none.ShapeOverflow, none.Dropped, police.Accepted)
	}
}
