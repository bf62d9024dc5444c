package policy

import (
	"strings"
	"testing"
)

// otherWarnings are c's warnings but those of policing rules that take
// TCP (TestPoliceTCPWarning's), for the tests of other warnings.
func otherWarnings(c *Compiled) []string {
	var out []string
	for _, w := range c.Warnings() {
		if !strings.Contains(w, "\" polices TCP (") {
			out = append(out, w)
		}
	}
	return out
}

// TestPoliceTCPWarning: a rule that polices (an enforcing limit rule that
// drops what exceeds it, not shaping) and whose match takes TCP (proto tcp,
// or none) is accepted with a warning that points to shape = true with the
// measured difference; shaping, shadow, marking, accept, drop and UDP-only
// rules get none.
func TestPoliceTCPWarning(t *testing.T) {
	src := ruleTable("tcp", `proto = ["tcp"], dport = ["80"]`, `bitrate = "10mbit"`) +
		ruleTable("any", `dport = ["8080"]`, `pps = 100`) +
		ruleTable("window", `proto = ["udp", "tcp"], dport = ["81"]`, `algo = "fixed-window"`, `pps = 10`) +
		ruleTable("shaped", `proto = ["tcp"], dport = ["82"]`, `bitrate = "10mbit"`, `shape = true`) +
		ruleTable("leaky", `proto = ["tcp"], dport = ["83"]`, `algo = "leaky-bucket"`, `pps = 10`) +
		ruleTable("shadow", `proto = ["tcp"], dport = ["84"]`, `pps = 10`, `mode = "shadow"`) +
		ruleTable("marks", `proto = ["tcp"], dport = ["85"]`, `pps = 10`, `on-exceed = "mark"`, `set-mark = "1"`) +
		ruleTable("udp", `proto = ["udp"]`, `pps = 10`) +
		ruleTable("ok", `proto = ["tcp"], dport = ["22"]`, acceptAction) +
		ruleTable("no", `proto = ["tcp"], dport = ["23"]`, dropAction)
	c := mustCompile(t, src, Options{})
	var got []string
	for _, w := range c.Warnings() {
		if strings.Contains(w, "polices TCP") {
			got = append(got, w)
		}
	}
	want := []string{
		`rule "tcp" polices TCP (its match takes TCP, and it drops what exceeds the rate): a TCP flow that loses packets backs off to about half the rate (one TCP transfer policed at 20mbit got 10.2 Mbit/s, shaped 19.5: docs/shaping.md); add shape = true (--shape): packets over the rate wait in the kernel, up to max-delay, instead of being dropped, or match proto = ["udp"] if TCP is not meant`,
		`rule "any" polices TCP (its match takes every protocol, TCP too, and it drops what exceeds the rate): a TCP flow that loses packets backs off to about half the rate (one TCP transfer policed at 20mbit got 10.2 Mbit/s, shaped 19.5: docs/shaping.md); add shape = true (--shape): packets over the rate wait in the kernel, up to max-delay, instead of being dropped, or match proto = ["udp"] if TCP is not meant`,
		`rule "window" polices TCP (its match takes TCP, and it drops what exceeds the rate): a TCP flow that loses packets backs off to about half the rate (one TCP transfer policed at 20mbit got 10.2 Mbit/s, shaped 19.5: docs/shaping.md); use algo = "leaky-bucket" (or "token-bucket" with shape = true): packets over the rate wait in the kernel, up to max-delay, instead of being dropped (fixed-window cannot shape), or match proto = ["udp"] if TCP is not meant`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n got %q\nwant %q", got, want)
	}
}
