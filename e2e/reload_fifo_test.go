package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadFIFONeverBlocks: the --policy path replaced by a named pipe
// (no writer, ever) and SIGHUP: the reload fails at once with one clear
// line, the previous policy goes on deciding real traffic, a second SIGHUP
// fails the same way, and SIGTERM still stops the process promptly (a
// reader blocked on the pipe used to hold the main loop for ever: the
// queues unbound, the process never exited).
func TestReloadFIFONeverBlocks(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newShapedTopo(t, "[[rule]]\nname = \"limited\"\npps = 10\nburst = 5\n")
	pol := tp.Policy
	sh := tp.startShaper("--queue", "0", "--policy", pol, "--stats-interval", "0", "--control-socket", tp.Sock)

	if err := os.Remove(pol); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(pol, 0o644); err != nil {
		t.Fatal(err)
	}
	want := pol + ": not a regular file (a named pipe): a rule file must be one"
	sh.signal(syscall.SIGHUP)
	sh.waitStderr("reload failed", 10*time.Second)
	sh.waitStderr(want, time.Second)
	for _, line := range strings.Split(sh.err.String(), "\n") {
		if strings.Contains(line, "reload failed") && !strings.Contains(line, want) {
			t.Errorf("the failed reload's line lacks %q: %s", want, line)
		}
	}

	// The previous policy still decides: one flow at 200 pps for 1 s
	// through a 10 pps bucket of 5 gets its burst and the rate, not all.
	rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "2s")
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "20000", "--pps", "200", "--count", "200", "--duration", "5s")
	r := recvDone(rc, 25*time.Second)
	if r.Total < 5 || r.Total >= s.Sent/2 {
		t.Errorf("after the failed reload: %d of %d received, want the burst of 5 and about 10 per second (under half)", r.Total, s.Sent)
	}

	// Again: not stuck behind the first.
	sh.signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(sh.err.String(), "reload failed") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second failed reload within 10 s:\n%s", indent(sh.err.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// SIGTERM: a clean exit. The bound is 2 s; the wait goes on to 10 s
	// so that a slow exit is reported as such, not as a hang.
	t0 := time.Now()
	sh.signal(syscall.SIGTERM)
	if err := sh.wait(10 * time.Second); err != nil {
		t.Fatalf("packetshaper exited with %v after SIGTERM", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("packetshaper took %v to exit after SIGTERM, want at most 2 s", d)
	}
	if _, dropped, _ := finalStats(t, sh.err.String()); dropped == 0 {
		t.Errorf("final stats show no drop: the limit did not apply")
	}
}
