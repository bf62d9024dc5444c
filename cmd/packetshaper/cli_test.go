package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// oldFlags are the flags of every command as the hand-parsed command line
// (Go's package flag, before cobra) defined them, with their defaults:
// DefValue as package flag recorded it, and for the limiter flags, whose
// DefValue is empty, the schema's default that their help states.
var oldFlags = map[string][]struct{ name, def, helpDefault string }{
	"": { // live
		{"algo", "", "token-bucket"}, {"batch", "64", ""}, {"bitrate", "", ""}, {"burst", "", "5 packets, or with bitrate max(65535 bytes, 0.1 s of rate)"},
		{"control-socket", "/run/packetshaper/packetshaper.sock", ""}, {"copy-range", "256", ""},
		{"dst-prefix4", "", "32"}, {"dst-prefix6", "", "128"}, {"fail-closed", "false", ""},
		{"flow-timeout", "", "1m, raised with a warning to what the limiter remembers of an idle flow when longer"},
		{"global", "", ""}, {"global-slack", "", "0.01 (global rules)"}, {"key", "", "5tuple"}, {"latency", "false", ""},
		{"log-format", "text", ""}, {"malformed", "accept", ""}, {"max-delay", "", "50ms"}, {"max-flows", "", "65536"},
		{"max-held", "1024", ""}, {"metrics-addr", "", ""}, {"offload", "false", ""}, {"offload-after", "1000", ""},
		{"offload-timeout", "2s", ""}, {"policy", "", ""}, {"pps", "", ""}, {"queue", "0", ""}, {"queue-maxlen", "8192", ""},
		{"read-buffer", "33554432", ""}, {"redis", "", ""}, {"redis-password-file", "", ""}, {"rt-priority", "0", ""},
		{"shape", "", ""}, {"src-prefix4", "", "32"}, {"src-prefix6", "", "128"}, {"stats-interval", "10s", ""},
		{"symmetric", "", "false"}, {"window", "", "1s"},
	},
	"replay": {
		{"algo", "", "token-bucket"}, {"bitrate", "", ""}, {"burst", "", "5 packets, or with bitrate max(65535 bytes, 0.1 s of rate)"},
		{"dst-prefix4", "", "32"}, {"dst-prefix6", "", "128"},
		{"flow-timeout", "", "1m, raised with a warning to what the limiter remembers of an idle flow when longer"},
		{"global", "", ""}, {"global-slack", "", "0.01 (global rules)"}, {"json", "false", ""}, {"key", "", "5tuple"},
		{"malformed", "accept", ""}, {"max-delay", "", "50ms"}, {"max-flows", "", "65536"}, {"max-held", "1024", ""},
		{"policy", "", ""}, {"pps", "", ""}, {"progress", "auto", ""}, {"queue", "0", ""}, {"redis", "", ""},
		{"redis-password-file", "", ""}, {"report", "", ""}, {"shape", "", ""}, {"src-prefix4", "", "32"},
		{"src-prefix6", "", "128"}, {"symmetric", "", "false"}, {"top", "10", ""}, {"verdicts", "", ""}, {"window", "", "1s"},
		{"write-accepted", "", ""}, {"write-dropped", "", ""},
	},
	"flows":  {{"control-socket", "", ""}, {"json", "false", ""}, {"queue", "0", ""}, {"rule", "", ""}, {"sort", "drops", ""}, {"top", "0", ""}},
	"status": {{"control-socket", "", ""}, {"json", "false", ""}, {"queue", "0", ""}},
}

// TestFlagsKept: every flag of every command before cobra is still there,
// with the same default (and the same stated default for the limiter
// flags), and takes a value or not as before.
func TestFlagsKept(t *testing.T) {
	root := newRootCmd(&cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	for sub, flags := range oldFlags {
		cmd := root
		if sub != "" {
			var err error
			if cmd, _, err = root.Find([]string{sub}); err != nil || cmd.Name() != sub {
				t.Fatalf("no subcommand %s: %v", sub, err)
			}
		}
		for _, o := range flags {
			f := cmd.Flags().Lookup(o.name)
			switch {
			case f == nil:
				t.Errorf("packetshaper %s: no --%s", sub, o.name)
			case f.DefValue != o.def && !(f.DefValue == "false" && o.def == "" && f.Value.Type() == "bool"):
				t.Errorf("packetshaper %s --%s: default %q, was %q", sub, o.name, f.DefValue, o.def)
			case o.helpDefault != "" && !strings.Contains(f.Usage, "(default "+o.helpDefault+")"):
				t.Errorf("packetshaper %s --%s: help %q does not state the default %q", sub, o.name, f.Usage, o.helpDefault)
			case f.Shorthand != "":
				t.Errorf("packetshaper %s --%s: has a shorthand -%s (none before)", sub, o.name, f.Shorthand)
			}
		}
	}
}

// TestHelpNamesSubcommands: --help (and help) lists every subcommand and
// the live flags in their groups, on stdout, exit 0.
func TestHelpNamesSubcommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
		for _, want := range []string{"replay", "check", "flows", "status", "version", "completion",
			"\nFlags:\n", "\nPolicy flags:\n", "\nLimiter flags", "--queue N", "--pps", "--burst"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q: help has no %q:\n%s", args, want, out.String())
			}
		}
		if strings.Contains(out.String(), "gendocs") {
			t.Errorf("%q: help lists the hidden gendocs", args)
		}
	}
}

// TestUnknownFlagSuggests: a mistyped flag is one line with a did-you-mean
// and where help is, exit 2, for every command.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--burts", "4"}, "'--burst'"},
		{[]string{"--pps", "10", "--queu", "1"}, "'--queue'"},
		{[]string{"-queue", "0"}, "'--queue'"},
		{[]string{"-help"}, "'--help'"},
		{[]string{"replay", "--polcy", "x.toml", "x.pcap"}, "'--policy'"},
		{[]string{"flows", "--jsn"}, "'--json'"},
		{[]string{"status", "--control-sock", "x"}, "'--control-socket'"},
		{[]string{"replya", "x.pcap"}, "'replay'"},
		{[]string{"stauts"}, "'status'"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		msg := errb.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "did you mean "+c.want) || !strings.Contains(msg, "--help')") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with did you mean %s and --help", c.args, code, out.String(), msg, c.want)
		}
	}
}

// TestExitStatus: the exit statuses docs/operations.md#exit-status states:
// 0 on success, 2 for bad usage (flags, arguments, a bad rule file), 1 when
// a capture fails.
func TestExitStatus(t *testing.T) {
	bad := writeFile(t, "bad.toml", "[[rule]]\nname = \"a\"\npps = -1\n")
	good := writeFile(t, "good.toml", "[[rule]]\nname = \"a\"\npps = 10\n")
	notCap := writeFile(t, "x.pcap", "not a capture at all, long enough to be read as one")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--version"}, 0},
		{[]string{"version"}, 0},
		{[]string{"check", good}, 0},
		{[]string{"check", "--help"}, 0},
		{[]string{"completion", "bash"}, 0},
		{[]string{"replay", "--pps", "10", filepath.Join(testdata, "multiflow.pcap")}, 0},
		{[]string{"replay", "--pps", "10", notCap}, 1},
		{[]string{"check", bad}, 2},
		{[]string{"check"}, 2},
		{[]string{"check", good, good}, 2},
		{[]string{"version", "x"}, 2},
		{[]string{"--pps"}, 2},
		{[]string{"--pps", "x"}, 2},
		{[]string{"--queue", "0"}, 2}, // no limit
		{[]string{"replay", "--pps", "10"}, 2},
		{[]string{"replay", "--policy", bad, filepath.Join(testdata, "multiflow.pcap")}, 2},
		{[]string{"flows", "--sort", "x"}, 2},
		{[]string{"status", "extra"}, 2},
		{[]string{"nosuchcommand"}, 2},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != c.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.code, errb.String())
		} else if code == 2 && strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%q: stderr %q, want one line", c.args, errb.String())
		}
	}
}
