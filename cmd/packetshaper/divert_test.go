package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/divert"
)

// dnsPolicy: rules for udp/53 and udp/9000 on queue 0, and one of queue 1
// (as an array of inline tables, the other spelling of [[rule]]).
const dnsPolicy = `rule = [
  { name = "dns", match = { proto = ["udp"], dport = ["53"] }, pps = 10 },
  { name = "app", match = { proto = ["udp"], dport = ["9000"] }, pps = 10 },
  { name = "q1", match = { queue = [1] }, pps = 10 },
]
`

// TestRulesFromPolicy: packetshaper divert prints rules.sh's options for
// each divert rule the file needs, and warns about a rule of another queue.
func TestRulesFromPolicy(t *testing.T) {
	pol := writeFile(t, "p.toml", dnsPolicy)
	var out, errb bytes.Buffer
	if code := run([]string{"divert", "--policy", pol, "--queue", "0"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := out.String(), "--family both --proto udp --dport 53\n--family both --proto udp --dport 9000\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if !strings.Contains(errb.String(), `warning: rule "q1" can never see a packet`) {
		t.Errorf("stderr %q: no warning about q1", errb.String())
	}
	for _, args := range [][]string{{"divert"}, {"divert", "--policy", pol, "--queue", "x"}, {"divert", "--policy", pol + ".missing"}, {"divert", "--policy", pol, "extra"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out.String(), errb.String())
		}
	}
}

// TestCheckWarnsFromDefault: with no divert rule in force (the tests' own
// namespace has none), check reads the service's RULES_OPTS: udp/9000
// diverted, the dns rule can never see a packet; with --policy there,
// every rule of queue 0 sees packets.
func TestCheckWarnsFromDefault(t *testing.T) {
	if ds, _ := divert.InForce(); len(ds) > 0 {
		t.Skip("divert rules are in force in this namespace: they, not the test's file, are checked")
	}
	dir := t.TempDir()
	pol := writeFile(t, "p.toml", dnsPolicy)
	def := filepath.Join(dir, "default")
	old := divertDefault
	divertDefault = def
	t.Cleanup(func() { divertDefault = old })

	check := func() string {
		var out, errb bytes.Buffer
		if code := run([]string{"check", pol}, &out, &errb); code != 0 {
			t.Fatalf("check: exit %d: %s", code, errb.String())
		}
		// q1 takes TCP: its warning is TestPoliceTCPWarning's.
		var lines []string
		for _, l := range strings.SplitAfter(errb.String(), "\n") {
			if !strings.Contains(l, `"q1" polices TCP`) {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "")
	}
	if s := check(); s != "" {
		t.Errorf("no default file: stderr %q, want nothing", s)
	}
	os.WriteFile(def, []byte("QUEUE=0\nRULES_OPTS=\"--proto udp --dport 9000\"\n"), 0o644)
	s := check()
	for _, want := range []string{`rule "dns" can never see a packet: it matches udp dport 53, but only udp dport 9000 to queue 0 is diverted by ` + def + `'s RULES_OPTS (QUEUE=0)`, `rule "q1" can never see a packet`} {
		if !strings.Contains(s, want) {
			t.Errorf("stderr has no %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"app"`) {
		t.Errorf("a warning about app, which sees udp/9000:\n%s", s)
	}
	os.WriteFile(def, []byte("QUEUE=0\nRULES_OPTS=\"--policy "+pol+"\"\n"), 0o644)
	if s := check(); strings.Contains(s, `"dns"`) || strings.Contains(s, `"app"`) || !strings.Contains(s, `"q1"`) {
		t.Errorf("RULES_OPTS --policy: stderr %q; want a warning about q1 only", s)
	}
}

// TestCheckWarnsOwnerChain: check warns about a uid-keyed rule when the
// divert rules (here the default file's) feed it from INPUT only, and not
// when they divert OUTPUT.
func TestCheckWarnsOwnerChain(t *testing.T) {
	if ds, _ := divert.InForce(); len(ds) > 0 {
		t.Skip("divert rules are in force in this namespace: they, not the test's file, are checked")
	}
	dir := t.TempDir()
	pol := writeFile(t, "p.toml", "[[rule]]\nname = \"users\"\nmatch = { uid = [\"1000-1999\"], proto = [\"udp\"] }\nkey = \"uid\"\npps = 100\n")
	def := filepath.Join(dir, "default")
	old := divertDefault
	divertDefault = def
	t.Cleanup(func() { divertDefault = old })
	check := func(opts string) string {
		os.WriteFile(def, []byte("QUEUE=0\nRULES_OPTS=\""+opts+"\"\n"), 0o644)
		var out, errb bytes.Buffer
		if code := run([]string{"check", pol}, &out, &errb); code != 0 {
			t.Fatalf("check: exit %d: %s", code, errb.String())
		}
		return errb.String()
	}
	const want = `rule "users" goes by the socket owner (key uid, match.uid), but only udp to queue 0 is diverted, from INPUT or FORWARD`
	if s := check("--proto udp"); !strings.Contains(s, want) || !strings.Contains(s, "--chain OUTPUT") {
		t.Errorf("INPUT (the default chain): stderr has no %q:\n%s", want, s)
	}
	for _, opts := range []string{"--proto udp --chain OUTPUT", "--policy " + pol + " --chain OUTPUT"} {
		if s := check(opts); strings.Contains(s, "goes by the socket owner") {
			t.Errorf("RULES_OPTS %q: an owner warning:\n%s", opts, s)
		}
	}
	if s := check("--policy " + pol + " --chain FORWARD"); !strings.Contains(s, "goes by the socket owner") {
		t.Errorf("RULES_OPTS --policy --chain FORWARD: no owner warning:\n%s", s)
	}
}

// TestCheckPackagedDefault: the package's own configuration, its
// /etc/default/packetshaper (dist/default) and the rule file it installs
// (policy/testdata/example.toml), passes check with no warning at all: its
// RULES_OPTS diverts from the rule file, and no policing rule takes TCP.
func TestCheckPackagedDefault(t *testing.T) {
	if ds, _ := divert.InForce(); len(ds) > 0 {
		t.Skip("divert rules are in force in this namespace: they, not the package's default, are checked")
	}
	src, err := os.ReadFile("../../dist/default")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := filepath.Abs("../../policy/testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	const installed = "/etc/packetshaper/policy.toml"
	if !strings.Contains(string(src), `RULES_OPTS="--policy `+installed+`"`) || !strings.Contains(string(src), `PACKETSHAPER_OPTS="--policy `+installed) {
		t.Fatalf("dist/default does not divert from and shape by %s:\n%s", installed, src)
	}
	def := filepath.Join(t.TempDir(), "default")
	os.WriteFile(def, []byte(strings.ReplaceAll(string(src), installed, pol)), 0o644)
	old := divertDefault
	divertDefault = def
	t.Cleanup(func() { divertDefault = old })
	var out, errb bytes.Buffer
	if code := run([]string{"check", pol}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Errorf("check of the packaged configuration: exit %d, stderr:\n%s", code, errb.String())
	}
}
