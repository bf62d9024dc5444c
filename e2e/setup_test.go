package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// The opening most e2e tests share, once: a topology, the shipped divert
// rule (scripts/rules.sh) for UDP to port 9000 on queue 0, a policy file
// in a directory of the test's own. Each piece stands alone too, for the
// tests that need only some of them.

// divertUDP9000 adds rules.sh's rule sending family's ("ipv4", "ipv6" or
// "both") UDP datagrams to port 9000 in B to queue 0; the namespace's
// removal (newTopo's cleanup) removes it.
func (tp *topo) divertUDP9000(family string) {
	tp.t.Helper()
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", family)
}

// udpRule is a policy rule, name, limiting each flow of UDP to port dport
// to pps packets a second with a burst of burst: the policy of the tests
// that need one limit on the traffic they send to a port.
func udpRule(name, dport string, pps, burst float64) string {
	return fmt.Sprintf(`
[[rule]]
name  = %q
match = { proto = ["udp"], dport = [%q] }
pps   = %v
burst = %v
`, name, dport, pps, burst)
}

// policyFile writes text to policy.toml in a new t.TempDir and returns the
// directory (for a control socket beside it) and the file's path.
func policyFile(t *testing.T, text string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "policy.toml")
	writePolicy(t, path, text)
	return dir, path
}

// writePolicy writes text to path (a policy file) or fails the test.
func writePolicy(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// flowsListing runs packetshaper flows --json with the control socket sock
// and args in ns and decodes its lines (one flow each).
func (tp *topo) flowsListing(ns, sock string, args ...string) []control.Flow {
	tp.t.Helper()
	out := tp.must(ns, append([]string{shaperBin, "flows", "--control-socket", sock, "--json"}, args...)...)
	var fs []control.Flow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var f control.Flow
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			tp.t.Fatalf("flows --json line %q: %v\n%s", l, err, out)
		}
		fs = append(fs, f)
	}
	return fs
}

// shapedTopo is a topo with the IPv4 divert rule for UDP to port 9000 on
// queue 0 in force and a policy file written: what a test needs before it
// starts packetshaper.
type shapedTopo struct {
	*topo
	// Dir is the test's directory (t.TempDir), holding Policy; Sock is a
	// control socket's path in it (nothing listens there until a shaper
	// is started with --control-socket Sock).
	Dir, Policy, Sock string
}

// newShapedTopo returns newTopo(t) with divertUDP9000("ipv4") and policy
// written to policy.toml in a directory of its own.
func newShapedTopo(t *testing.T, policy string) *shapedTopo {
	t.Helper()
	tp := newTopo(t)
	tp.divertUDP9000("ipv4")
	dir, pol := policyFile(t, policy)
	return &shapedTopo{topo: tp, Dir: dir, Policy: pol, Sock: filepath.Join(dir, "ps.sock")}
}

// startShaped starts packetshaper in B on queue 0 with the policy, the
// control socket Sock, no periodic stats line, and extra, and waits until
// it is shaping.
func (s *shapedTopo) startShaped(extra ...string) *proc {
	s.t.Helper()
	return s.startShaper(append([]string{"--queue", "0", "--policy", s.Policy, "--control-socket", s.Sock, "--stats-interval", "0"}, extra...)...)
}

// dst9000 returns B's address in family ("ipv4" or "ipv6") with port 9000,
// as psend's --dst takes it.
func (tp *topo) dst9000(family string) string {
	if family == "ipv6" {
		return "[" + tp.IP6B + "]:9000"
	}
	return tp.IPB + ":9000"
}

// udpHdrLen is the bytes of the IP and UDP headers before a UDP payload in
// family (no IP options or extension headers).
func udpHdrLen(family string) int {
	if family == "ipv6" {
		return 40 + 8
	}
	return 20 + 8
}

// newShaper9000 is the opening of the tests that shape by flags alone:
// newTopo(t), divertUDP9000(family), and packetshaper started in B on
// queue 0 with args.
func newShaper9000(t *testing.T, family string, args ...string) (*topo, *proc) {
	t.Helper()
	tp := newTopo(t)
	tp.divertUDP9000(family)
	return tp, tp.startShaper(append([]string{"--queue", "0"}, args...)...)
}

// sentFlow returns the sender's flow from source port 10000 and fails t
// unless it sent pps × d packets (what: "datagrams", "packets"), ±5 %.
func sentFlow(t *testing.T, s sendResult, pps int, d time.Duration, what string) sendFlow {
	t.Helper()
	f, ok := s.Flows["10000"]
	if !ok {
		t.Fatalf("sender reports no flow 10000: %+v", s)
	}
	if want := float64(pps) * d.Seconds(); math.Abs(float64(f.Sent)-want) > 0.05*want {
		t.Errorf("the sender sent %d %s, want %.0f ±5%%", f.Sent, what, want)
	}
	return f
}

// publicDir returns a new directory any user may enter (t.TempDir and the
// e2e binaries' directory are root's alone, 0700), removed in cleanup.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "packetshaper-e2e-public-")
	if err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// publicCopy returns a copy of the binary bin that any user may run, in a
// publicDir of its own.
func publicCopy(t *testing.T, bin string) string {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(publicDir(t), filepath.Base(bin))
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
