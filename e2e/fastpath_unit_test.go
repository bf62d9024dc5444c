package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestFastpathUnprivileged runs packetshaper --fastpath as
// dist/packetshaper.service does: an unprivileged user (nobody) whose
// capabilities are CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON (ambient,
// inheritable, bounding set) and nothing else, with no_new_privs. With
// --fastpath-required it loads and attaches the program (one at tcx
// ingress) and the kernel rule limits each flow as an ideal token bucket
// would (±5 %). Without CAP_PERFMON the kernel refuses the program, which
// is why the unit grants it (when it no longer does, the unit should drop
// it: the test says so).
func TestFastpathUnprivileged(t *testing.T) {
	parallel(t)
	needShaper(t)
	bin, pol := nobodyFiles(t, fastpathPolicy)
	tp := newTopo(t)
	tp.rules("add", "--fastpath", "--queue", "0")
	tp.queueTableReadable()
	run := func(caps string) *proc {
		return tp.start(tp.B, "packetshaper (nobody, "+caps+")", asNobody(caps, bin, "--queue", "0", "--policy", pol, "--fastpath", tp.VethB, "--fastpath-required",
			"--control-socket", "", "--stats-interval", "0")...)
	}

	// Without CAP_PERFMON: refused, a non-zero exit.
	p := run("+net_admin,+bpf")
	if err := p.wait(20 * time.Second); err == nil {
		t.Errorf("packetshaper --fastpath-required with CAP_NET_ADMIN and CAP_BPF only started: CAP_PERFMON is no longer needed, drop it from dist/packetshaper.service")
	} else {
		t.Logf("without CAP_PERFMON: %v: %s", err, strings.TrimSpace(p.err.String()))
	}

	sh := run("+net_admin,+bpf,+perfmon")
	tp.waitBound(sh, 0)
	sh.waitStderr("msg=shaping", 10*time.Second)
	status := tp.must(tp.B, "cat", fmt.Sprintf("/proc/%d/status", sh.cmd.Process.Pid))
	// CAP_NET_ADMIN (bit 12), CAP_PERFMON (38), CAP_BPF (39).
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "CapEff:\t000000c000001000", "CapBnd:\t000000c000001000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("packetshaper's /proc/PID/status lacks %q:\n%s", want, indent(status))
		}
	}
	if n := testutil.TCXPrograms(t, tp.B, tp.VethB); n != 1 {
		t.Fatalf("%d programs at tcx ingress of %s, want 1\n%s", n, tp.VethB, indent(sh.err.String()))
	}
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s := tp.send(limitSendArgs(tp.IPB + ":9000")...)
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)
	if strings.Contains(log, "fast path off") {
		t.Fatalf("the fast path did not run:\n%s", indent(log))
	}
	if len(s.Flows) != limFlows {
		t.Fatalf("sender reports %d flows, want %d", len(s.Flows), limFlows)
	}
	for _, sport := range sortedPorts(s.Flows) {
		f := s.Flows[sport]
		checkSent(t, sport, f.Sent, 1)
		checkWithin(t, fmt.Sprintf("flow %s (sent %d)", sport, f.Sent), float64(r.Received["9000"][sport]), expectTokenBucket(f.TimesUs), 0.05)
	}
	_, _, line := finalStats(t, log)
	if p, a := statField(t, line, "rule.kern.packets"), statField(t, line, "rule.kern.accepted"); p != s.Sent || a != r.Total {
		t.Errorf("stats: rule.kern.packets=%d accepted=%d; %d sent, %d received", p, a, s.Sent, r.Total)
	}
}
