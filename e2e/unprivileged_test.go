package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUnprivileged runs packetshaper as packetshaper.service does: as an
// unprivileged user (nobody) whose only capability is CAP_NET_ADMIN
// (ambient, inheritable, bounding set), with no_new_privs, reading its
// policy with --policy and serving metrics. It binds the queue, limits the
// limiting traffic as root does (token bucket, each flow within 10 %),
// serves /metrics, reloads on SIGHUP, and stops cleanly on SIGTERM.
func TestUnprivileged(t *testing.T) {
	parallel(t)
	needShaper(t)
	// The binary and the policy must be readable by nobody: t.TempDir and
	// the build directory are root's (0700).
	dir, err := os.MkdirTemp("", "packetshaper-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "packetshaper")
	pol := filepath.Join(dir, "policy.toml")
	if out, err := goBuild(bin, "./cmd/packetshaper"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	policy := fmt.Sprintf("[[rule]]\nname = \"udp9000\"\nmatch = { proto = [\"udp\"], dport = [\"9000\"] }\npps = %v\nburst = %v\n", limRate, limBurst)
	if err := os.WriteFile(pol, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, bin, pol} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	tp := newTopo(t)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	// The kernel's queue table, which the fail-open monitor reads, is
	// root's (0440): the unit makes it readable, in its ExecStartPre, as
	// here in B.
	tp.must(tp.B, "sh", "-c", "modprobe -q nfnetlink_queue 2>/dev/null; chmod a+r /proc/net/netfilter/nfnetlink_queue")
	sh := tp.start(tp.B, "packetshaper (nobody, CAP_NET_ADMIN)", "setpriv",
		"--reuid=65534", "--regid=65534", "--clear-groups",
		"--bounding-set=-all,+net_admin", "--inh-caps=-all,+net_admin", "--ambient-caps=-all,+net_admin",
		"--no-new-privs", bin, "--queue", "0", "--policy", pol, "--metrics-addr", "127.0.0.1:9464", "--stats-interval", "0")
	tp.waitBound(sh, 0)

	// What the process is: nobody, CAP_NET_ADMIN (bit 12) and nothing else.
	status := tp.must(tp.B, "cat", fmt.Sprintf("/proc/%d/status", sh.cmd.Process.Pid))
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "CapEff:\t0000000000001000", "CapPrm:\t0000000000001000", "CapBnd:\t0000000000001000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("packetshaper's /proc/PID/status lacks %q:\n%s", want, indent(status))
		}
	}
	// Metrics (a TCP listener on loopback) work as that user.
	var metrics string
	for try := 0; try < 50; try++ {
		if metrics, err = tp.run(tp.B, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(metrics, "packetshaper_packets_total") {
		t.Errorf("GET /metrics: %v:\n%s", err, indent(metrics))
	}
	// SIGHUP re-reads the policy, which nobody can read.
	sh.signal(syscall.SIGHUP)
	sh.waitStderr("reloaded", 5*time.Second)

	sendLimited(t, tp, sh, "token-bucket", tp.IPB+":9000")
}
