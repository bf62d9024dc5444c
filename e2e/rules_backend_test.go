package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pathWithout is a PATH of one directory holding a link to every command
// of the usual directories but those named in drop: a host where they are
// not installed.
func pathWithout(t *testing.T, drop ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			skip := false
			for _, p := range drop {
				skip = skip || strings.HasPrefix(name, p)
			}
			if skip {
				continue
			}
			// The first directory holding a name wins, as in PATH.
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				continue
			}
			os.Symlink(filepath.Join(d, name), filepath.Join(dir, name))
		}
	}
	return dir
}

// TestRulesBackendChoice: without --backend, rules.sh picks iptables where
// the iptables command is installed and nft on an nftables-only host (a
// PATH without iptables/ip6tables), saying so on stderr; an explicit
// --backend still wins. Dry runs, inside an empty namespace of their own
// as root (the host's rules cannot make a rule "present").
func TestRulesBackendChoice(t *testing.T) {
	parallel(t)
	ns := rootNetns(t)
	c := nftCases[0]
	add := append([]string{"add", "--dry-run"}, c.args...)
	noIpt := []string{"PATH=" + pathWithout(t, "iptables", "ip6tables")}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft command on this host: the nftables-only case cannot be shown")
	}

	out, errOut, err := runRules(t, ns, noIpt, add...)
	if want := c.dryRun("", c.queueStmt()); err != nil || out != want || !strings.Contains(errOut, "no iptables command: --backend nft") {
		t.Errorf("no iptables, rules.sh %s: %v; printed\n%s\nstderr\n%s\nwant\n%s\nand the choice of nft said on stderr",
			strings.Join(add, " "), err, indent(out), indent(errOut), indent(want))
	}
	// An explicit --backend iptables there: refused, it names iptables.
	explicit := append([]string{"add", "--backend", "iptables", "--dry-run"}, c.args...)
	if out, errOut, err := runRules(t, ns, noIpt, explicit...); err == nil || !strings.Contains(errOut, "iptables not found") {
		t.Errorf("no iptables, rules.sh %s: %v, stdout %q, stderr %q; want an error naming iptables", strings.Join(explicit, " "), err, out, errOut)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables command on this host: the default iptables case cannot be shown")
	}
	out, errOut, err = runRules(t, ns, nil, add...)
	if err != nil || !strings.HasPrefix(out, "iptables -w -I INPUT 1 ") || strings.Contains(out, "nft") || errOut != "" {
		t.Errorf("with iptables, rules.sh %s: %v; printed\n%s\nstderr\n%s\nwant iptables commands", strings.Join(add, " "), err, indent(out), indent(errOut))
	}
	// An explicit --backend nft where iptables is installed: nft, silently.
	explicit = append([]string{"add", "--backend", "nft", "--dry-run"}, c.args...)
	if out, errOut, err := runRules(t, ns, nil, explicit...); err != nil || out != c.dryRun("", c.queueStmt()) || errOut != "" {
		t.Errorf("rules.sh %s: %v; printed\n%s\nstderr\n%s", strings.Join(explicit, " "), err, indent(out), indent(errOut))
	}
}
