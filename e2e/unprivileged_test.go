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
	bin, pol := nobodyFiles(t, udpRule("udp9000", "9000", limRate, limBurst))
	tp := newTopo(t)
	tp.divertUDP9000("ipv4")
	tp.queueTableReadable()
	sh := tp.start(tp.B, "packetshaper (nobody, CAP_NET_ADMIN)", asNobody("+net_admin", bin, "--queue", "0", "--policy", pol, "--metrics-addr", "127.0.0.1:9464", "--stats-interval", "0")...)
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
	var err error
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

// nobodyFiles builds packetshaper and writes policy to a file, both in a
// publicDir, readable by nobody; it returns the binary's and the policy's
// paths.
func nobodyFiles(t *testing.T, policy string) (bin, pol string) {
	t.Helper()
	dir := publicDir(t)
	bin, pol = filepath.Join(dir, "packetshaper"), filepath.Join(dir, "policy.toml")
	if out, err := goBuild(bin, "./cmd/packetshaper"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	writePolicy(t, pol, policy)
	for _, p := range []string{bin, pol} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, pol
}

// queueTableReadable makes the kernel's queue table in B, which the
// fail-open monitor reads and which is root's (0440), readable to all, as
// the unit's ExecStartPre does.
func (tp *topo) queueTableReadable() {
	tp.t.Helper()
	tp.must(tp.B, "sh", "-c", "modprobe -q nfnetlink_queue 2>/dev/null; chmod a+r /proc/net/netfilter/nfnetlink_queue")
}

// asNobody is the command line that runs args as packetshaper.service
// does: as nobody, with no_new_privs and only the capabilities caps
// ("+net_admin,+bpf": ambient, inheritable and bounding set).
func asNobody(caps string, args ...string) []string {
	return append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--bounding-set=-all," + caps, "--inh-caps=-all," + caps, "--ambient-caps=-all," + caps, "--no-new-privs"}, args...)
}
