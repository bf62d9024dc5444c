package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current output")

const testdata = "../../testdata"

// goldenCases are replays whose --json output and --verdicts file are
// checked in under testdata/golden/<name>.json and .verdicts.
var goldenCases = append([]goldenCase{
	{"multiflow", []string{"--pps", "10", "--burst", "3"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-ns-be", []string{"--pps", "10", "--burst", "3"}, []string{"multiflow-ns-be.pcap"}, 0},
	{"multiflow-gz", []string{"--pps", "10", "--burst", "3"}, []string{"multiflow.pcap.gz"}, 0},
	{"multiflow-fixed-window", []string{"--pps", "10", "--algo", "fixed-window", "--window", "500ms"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-sliding-window", []string{"--pps", "10", "--algo", "sliding-window"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-sliding-window-counter", []string{"--pps", "10", "--algo", "sliding-window-counter"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-bitrate", []string{"--bitrate", "40kbit", "--burst", "1500"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-key-dst24", []string{"--pps", "30", "--key", "dst", "--dst-prefix4", "24"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-max-flows-2", []string{"--pps", "10", "--max-flows", "2"}, []string{"multiflow.pcap"}, 0},
	{"vlan-mpls-malformed-drop", []string{"--pps", "2", "--burst", "1", "--malformed", "drop"}, []string{"vlan-mpls.pcap"}, 0},
	{"mixed-pcapng", []string{"--pps", "2", "--burst", "1"}, []string{"mixed.pcapng"}, 0},
	{"mixed-pcapng-gz", []string{"--pps", "2", "--burst", "1"}, []string{"mixed.pcapng.gz"}, 0},
	// Three files as one capture (--concatenate: their timestamps one
	// clock, as before issue 30), and each with its own clock.
	{"stream", []string{"--pps", "10", "--burst", "3", "--concatenate"}, []string{"multiflow.pcap", "sll.pcap", "mixed.pcapng.gz"}, 0},
	{"stream-own-clocks", []string{"--pps", "10", "--burst", "3"}, []string{"multiflow.pcap", "sll.pcap", "mixed.pcapng.gz"}, 0},
	{"truncated", []string{"--pps", "10", "--burst", "3"}, []string{"truncated.pcap"}, 1},
	{"policy-mix", []string{"--policy", testdata + "/policy-mix.toml"}, []string{"policy-mix.pcapng"}, 0},
	{"multiflow-shape", []string{"--pps", "10", "--burst", "3", "--shape", "--max-delay", "500ms"}, []string{"multiflow.pcap"}, 0},
	{"multiflow-shape-bitrate", []string{"--bitrate", "40kbit", "--burst", "1500", "--algo", "leaky-bucket", "--max-delay", "1s"}, []string{"multiflow.pcap"}, 0},
}, formatCases("vlan-mpls", "ipv6-ext-frag", "sll", "sll2", "raw101", "raw12", "raw14", "ipv4-228", "ipv6-229", "null", "loop", "nflog")...)

// goldenCase is a replay of files with args whose output is checked in.
type goldenCase struct {
	name  string
	args  []string // flags; files are relative to testdata
	files []string
	code  int // expected exit status
}

// formatCases are the golden cases of one capture format each: testdata's
// NAME.pcap replayed at 2 pps with a burst of 1, as case NAME.
func formatCases(names ...string) []goldenCase {
	cs := make([]goldenCase, len(names))
	for i, n := range names {
		cs[i] = goldenCase{n, []string{"--pps", "2", "--burst", "1"}, []string{n + ".pcap"}, 0}
	}
	return cs
}

// TestGolden runs each golden case twice: both runs must give the same
// bytes (determinism), and those bytes must match the checked-in files
// (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			var outs [2][2][]byte
			for i := range outs {
				vf := filepath.Join(t.TempDir(), "verdicts")
				args := append(append([]string{}, tc.args...), "--json", "--verdicts", vf)
				for _, f := range tc.files {
					args = append(args, filepath.Join(testdata, f))
				}
				var stdout, stderr bytes.Buffer
				if code := runReplayArgs(args, &stdout, &stderr); code != tc.code {
					t.Fatalf("exit status %d, want %d; stderr: %s", code, tc.code, stderr.String())
				}
				var obj map[string]any
				if err := json.Unmarshal(stdout.Bytes(), &obj); err != nil {
					t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
				}
				v, err := os.ReadFile(vf)
				if err != nil {
					t.Fatal(err)
				}
				outs[i] = [2][]byte{stdout.Bytes(), v}
			}
			for j, ext := range []string{".json", ".verdicts"} {
				if !bytes.Equal(outs[0][j], outs[1][j]) {
					t.Errorf("%s differs between two runs", ext)
				}
				path := filepath.Join(testdata, "golden", tc.name+ext)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, outs[0][j], 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if !bytes.Equal(outs[0][j], want) {
					t.Errorf("%s differs from %s (go test -run TestGolden -update rewrites it):\n%s", ext, path, firstDiff(outs[0][j], want))
				}
			}
		})
	}
}

// firstDiff shows the first differing line of got and want.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  got  " + gl + "\n  want " + wl
		}
	}
	return ""
}

// TestReplayErrors: bad input is a one-line error on stderr and a non-zero
// exit status.
func TestReplayErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		err  string // substring of stderr
	}{
		{"no file", []string{"--pps", "10"}, 2, "no capture file given"},
		{"no limit", []string{filepath.Join(testdata, "sll.pcap")}, 2, "no limit given"},
		{"bad algo", []string{"--pps", "10", "--algo", "leaky", filepath.Join(testdata, "sll.pcap")}, 2, "--algo"},
		{"bad progress", []string{"--pps", "10", "--progress", "sometimes", filepath.Join(testdata, "sll.pcap")}, 2, "--progress"},
		{"missing file", []string{"--pps", "10", filepath.Join(testdata, "nonexistent.pcap")}, 1, "nonexistent.pcap: no such file"},
		{"directory", []string{"--pps", "10", testdata}, 1, "is a directory"},
		{"unsupported link type", []string{"--pps", "10", filepath.Join(testdata, "unsupported-linktype.pcap")}, 1,
			"unsupported-linktype.pcap: unsupported link type 802.11 (105)"},
		{"truncated", []string{"--pps", "10", filepath.Join(testdata, "truncated.pcap")}, 1,
			"truncated.pcap: packet 11: truncated: the file ends inside a record"},
		{"huge caplen", []string{"--pps", "10", filepath.Join(testdata, "huge-caplen.pcap")}, 1,
			"huge-caplen.pcap: packet 2: truncated"},
		{"not a capture", []string{"--pps", "10", filepath.Join(testdata, "README.md")}, 1,
			"README.md: not a pcap or pcapng capture"},
		{"mixed link types to pcap", []string{"--pps", "10", "--write-accepted", filepath.Join(t.TempDir(), "a.pcap"), filepath.Join(testdata, "mixed.pcapng")}, 1,
			"a pcap file holds one link type"},
		{"mixed link types to pcapng", []string{"--pps", "10", "--write-accepted", filepath.Join(t.TempDir(), "a.pcapng"), filepath.Join(testdata, "mixed.pcapng")}, 0, ""},
		{"output is an input", []string{"--pps", "10", "--write-dropped", filepath.Join(testdata, "sll.pcap"), filepath.Join(testdata, "sll.pcap")}, 2,
			"--write-dropped " + filepath.Join(testdata, "sll.pcap") + " is also a capture to replay"},
		{"unwritable output", []string{"--pps", "10", "--verdicts", filepath.Join(t.TempDir(), "no", "such", "dir"), filepath.Join(testdata, "sll.pcap")}, 1,
			"--verdicts: open"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runReplayArgs(tt.args, &stdout, &stderr)
		msg := stderr.String()
		if code != tt.code || !strings.Contains(msg, tt.err) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tt.name, code, msg, tt.code, tt.err)
		}
		if tt.code == 1 && strings.Count(msg, "\n") != 1 {
			t.Errorf("%s: stderr is not one line: %q", tt.name, msg)
		}
		// A file that cannot be opened is refused before anything is
		// replayed: no empty summary on stdout.
		if tt.name == "missing file" && stdout.Len() != 0 {
			t.Errorf("%s: printed %q before the error", tt.name, stdout.String())
		}
	}
}

// TestSummary checks the human summary's content.
func TestSummary(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--pps", "10", "--burst", "3", filepath.Join(testdata, "multiflow.pcap")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	wantLines(t, "summary", out,
		"packets    555: accepted 141, dropped 414 (malformed 0, no_ports 0, unmatched 0, non_ip 0)",
		"  default                     555        141        414          0          0        5         0",
		"flows      5 in the table at the end, 5 seen, 0 evicted, 0 expired",
		"capture    1 file(s), 3.010125s of capture time",
		"packets/s",
		"flows with the most drops (then shadow drops, marks):",
		"udp 10.0.0.1:40003 > 10.0.1.1:5004")
	if stderr.Len() != 0 {
		t.Errorf("stderr not empty when it is not a terminal: %q", stderr.String())
	}
}

// TestBinary builds the real binary and runs it: the exit status and the
// output streams as a user sees them.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "packetshaper")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	vf := filepath.Join(t.TempDir(), "v")
	cmd := exec.Command(bin, "replay", "--pps", "10", "--burst", "3", "--json", "--verdicts", vf, filepath.Join(testdata, "multiflow.pcap"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	want, err := os.ReadFile(filepath.Join(testdata, "golden", "multiflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("binary's --json differs from golden/multiflow.json")
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %q", stderr.String())
	}

	// The same capture, gzip-compressed, on standard input.
	in, err := os.Open(filepath.Join(testdata, "multiflow.pcap.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd = exec.Command(bin, "replay", "--pps", "10", "--burst", "3", "--json", "-")
	cmd.Stdin = in
	if out, err = cmd.Output(); err != nil || !bytes.Equal(out, want) {
		t.Errorf("replay of stdin: %v, output differs from golden/multiflow.json", err)
	}

	cmd = exec.Command(bin, "replay", "--pps", "10", filepath.Join(testdata, "truncated.pcap"))
	stderr.Reset()
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("truncated capture: %v, want exit status 1", err)
	}
	if !strings.Contains(string(out), "packets    10:") {
		t.Errorf("summary of the packets before the damage missing:\n%s", out)
	}
	if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "truncated.pcap: packet 11: truncated") {
		t.Errorf("stderr %q, want one line naming file, packet 11 and the problem", msg)
	}
}
