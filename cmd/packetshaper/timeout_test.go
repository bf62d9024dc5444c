package main

import (
	"bytes"
	"github.com/spf13/pflag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/policy"
)

// TestFlagsFlowTimeoutRaised: the limiter flags without --flow-timeout get
// the default raised to what the limiter remembers of an idle flow, with the
// warning start logs (--pps 0.01: a full bucket of 5 comes back after
// 500 s, not 60 s).
func TestFlagsFlowTimeoutRaised(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		timeout time.Duration
		warn    string
	}{
		{[]string{"--pps", "0.01"}, 500 * time.Second,
			`rule "default": flow-timeout: the default 1m0s is raised to 8m20s, what its token-bucket remembers of an idle flow (burst / rate: the time to refill the whole bucket): a flow forgotten sooner would come back with more than its limit`},
		{[]string{"--pps", "1", "--algo", "fixed-window", "--window", "1h"}, time.Hour,
			`rule "default": flow-timeout: the default 1m0s is raised to 1h0m0s, what its fixed-window remembers of an idle flow (the window): a flow forgotten sooner would come back with more than its limit`},
		{[]string{"--pps", "10"}, time.Minute, ""},
		{[]string{"--pps", "0.01", "--flow-timeout", "9m"}, 9 * time.Minute, ""},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		pf := addPolicyFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		src, err := pf.source(policy.Options{})
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		comp, err := src.Load()
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := time.Duration(comp.Policy().Rules[0].Limit.FlowTimeout); got != tc.timeout {
			t.Errorf("%q: flow timeout %v, want %v", tc.args, got, tc.timeout)
		}
		var warns []string
		for _, w := range comp.Warnings() {
			if strings.Contains(w, "flow-timeout") {
				warns = append(warns, w)
			}
		}
		if want := []string{tc.warn}; tc.warn == "" && len(warns) > 0 || tc.warn != "" && (len(warns) != 1 || warns[0] != want[0]) {
			t.Errorf("%q: warnings\n got %q\nwant %q", tc.args, warns, tc.warn)
		}
	}
}

// TestFlowTimeoutTooShortRefused: --flow-timeout (or a rule file's
// flow-timeout) shorter than what the limiter remembers stops start,
// replay and check with one line naming both values.
func TestFlowTimeoutTooShortRefused(t *testing.T) {
	want := "--flow-timeout: 1m0s is below what the fixed-window remembers of an idle flow, 1h0m0s (the window)"
	flags := []string{"--pps", "1", "--algo", "fixed-window", "--window", "1h", "--flow-timeout", "1m"}
	// Start checks the flags as source does (run would go on to bind a
	// queue if it let them through).
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pf := addPolicyFlags(fs)
	if err := fs.Parse(flags); err != nil {
		t.Fatal(err)
	}
	if _, err := pf.source(policy.Options{}); err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("start with %q: %v; want one line starting %q", flags, err, want)
	}
	args := append(append([]string{"replay"}, flags...), "x.pcap")
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	if msg := errb.String(); code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, want) {
		t.Errorf("run(%q) = %d, stderr %q; want 2 and one line with %q", args, code, msg, want)
	}
	pol := writeFile(t, "p.toml", "[[rule]]\nname = \"a\"\npps = 1\nalgo = \"fixed-window\"\nwindow = \"1h\"\nflow-timeout = \"1m\"\n")
	out.Reset()
	errb.Reset()
	code = run([]string{"check", pol}, &out, &errb)
	if want := "packetshaper check: " + pol + ":6:16: rule \"a\": flow-timeout: 1m0s is below what the fixed-window remembers of an idle flow, 1h0m0s"; code != 2 || !strings.HasPrefix(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("check: %d, stderr %q; want 2 and one line starting %q", code, errb.String(), want)
	}
}

// TestCheckFlowTimeoutWarns: check prints the raised default and the
// warning that names both values.
func TestCheckFlowTimeoutWarns(t *testing.T) {
	pol := writeFile(t, "p.toml", "[[rule]]\nname = \"slow\"\nmatch = { proto = [\"udp\"] }\npps = 0.01\n")
	var out, errb bytes.Buffer
	if code := run([]string{"check", pol}, &out, &errb); code != 0 {
		t.Fatalf("check: %d %s", code, errb.String())
	}
	want := "packetshaper check: warning: rule \"slow\": flow-timeout: the default 1m0s is raised to 8m20s, what its token-bucket remembers of an idle flow (burst / rate: the time to refill the whole bucket): a flow forgotten sooner would come back with more than its limit\n"
	if errb.String() != want {
		t.Errorf("check stderr\n got %q\nwant %q", errb.String(), want)
	}
	if !strings.Contains(out.String(), "flow-timeout = \"8m20s\"") {
		t.Errorf("check prints no flow-timeout of 8m20s:\n%s", out.String())
	}
}
