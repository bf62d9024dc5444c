package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// fastpathPolicy: a token bucket the kernel runs (UDP to 9000) and a
// sliding-window log, which stays in user space (UDP to 9001), both at the
// limiting tests' rate, per 5-tuple.
var fastpathPolicy = udpRule("kern", "9000", limRate, limBurst) + fmt.Sprintf(`
[[rule]]
name  = "user"
match = { proto = ["udp"], dport = ["9001"] }
algo  = "sliding-window"
pps   = %.0f
`, limRate)

// expectSlidingLog is what an exact sliding-window log of limRate per 1 s
// lets through of packets sent at timesUs.
func expectSlidingLog(timesUs []int64) float64 {
	var acc []int64
	for _, t := range timesUs {
		n := 0
		for _, a := range acc {
			if a > t-1e6 {
				n++
			}
		}
		if float64(n) < limRate {
			acc = append(acc, t)
		}
	}
	return float64(len(acc))
}

// attachModes are the fast path's attach modes the tests run in
// (--fastpath-attach): tcx, and tc (clsact + cls_bpf), which kernels
// without tcx use.
var attachModes = []string{"tcx", "tc"}

// forModes needs a shaper (needShaper) and runs f as a subtest per attach
// mode, beside each other.
func forModes(t *testing.T, f func(t *testing.T, mode string)) {
	t.Helper()
	needShaper(t)
	for _, mode := range attachModes {
		t.Run(mode, func(t *testing.T) {
			parallel(t)
			f(t, mode)
		})
	}
}

// attached counts the programs of mode at ingress of B's veth: tcx
// programs (BPF_PROG_QUERY) or packetshaper's tc filters.
func attached(t *testing.T, tp *topo, mode string) int {
	t.Helper()
	if mode == "tc" {
		return testutil.TCFilters(t, tp.B, tp.VethB)
	}
	return testutil.TCXPrograms(t, tp.B, tp.VethB)
}

// divertFastpath adds rules.sh's fast-path divert rule for queue 0 in B
// and writes policy to a file in a directory of its own; it returns the
// file and a control socket's path beside it (nothing listens there until
// a shaper is started with --control-socket sock).
func (tp *topo) divertFastpath(policy string) (pol, sock string) {
	tp.t.Helper()
	dir, pol := policyFile(tp.t, policy)
	tp.rules("add", "--fastpath", "--queue", "0")
	return pol, filepath.Join(dir, "ps.sock")
}

// startFastpathShaper starts packetshaper in B on queue 0 with the policy
// file pol, --fastpath on B's veth and extra, and waits for its start line
// (the program is attached before it says so).
func (tp *topo) startFastpathShaper(pol string, extra ...string) *proc {
	tp.t.Helper()
	sh := tp.startShaper(append([]string{"--queue", "0", "--policy", pol, "--fastpath", tp.VethB}, extra...)...)
	sh.waitStderr("msg=shaping", 10*time.Second)
	return sh
}

// sendSplit sends the limiting traffic to both rules of fastpathPolicy,
// the kernel's (UDP to 9000) and user space's (9001), one after the other,
// and returns what was sent to each and what arrived.
func (tp *topo) sendSplit() (kern, user sendResult, r recvResult) {
	tp.t.Helper()
	rc := tp.startRecv(":9000,:9001", "--duration", "40s", "--idle", "3s")
	kern = tp.send(limitSendArgs(tp.IPB + ":9000")...)
	user = tp.send(limitSendArgs(tp.IPB + ":9001")...)
	return kern, user, recvDone(rc, 45*time.Second)
}

// checkSplit checks what arrived of each flow sendSplit sent against the
// limiter of its rule in fastpathPolicy over its send times, ±5 %: an
// ideal token bucket (kern, port 9000), an exact sliding-window log (user,
// port 9001). what starts each message.
func checkSplit(t *testing.T, what string, kern, user sendResult, r recvResult) {
	t.Helper()
	for _, c := range []struct {
		port   string
		s      sendResult
		expect func([]int64) float64
	}{{"9000", kern, expectTokenBucket}, {"9001", user, expectSlidingLog}} {
		for _, sport := range sortedPorts(c.s.Flows) {
			f := c.s.Flows[sport]
			checkWithin(t, fmt.Sprintf("%sport %s flow %s (sent %d)", what, c.port, sport, f.Sent), float64(r.Received[c.port][sport]), c.expect(f.TimesUs), 0.05)
		}
	}
}

// runFastpath runs the split policy with --fastpath on B's veth, attached
// by mode, and the fast path's divert rule, sends the limiting traffic to
// both rules, stops packetshaper with SIGTERM and returns the sender's
// results, what arrived and packetshaper's log.
func runFastpath(t *testing.T, tp *topo, mode string) (kern, user sendResult, r recvResult, log string) {
	pol, _ := tp.divertFastpath(fastpathPolicy)
	sh := tp.startFastpathShaper(pol, "--fastpath-attach", mode)
	if n := attached(t, tp, mode); n != 1 {
		t.Fatalf("%d programs attached by %s at ingress of %s while packetshaper runs, want 1", n, mode, tp.VethB)
	}
	kern, user, r = tp.sendSplit()
	log = tp.stopShaper(sh)
	if n := attached(t, tp, mode); n != 0 {
		t.Errorf("%d programs attached by %s at ingress of %s after SIGTERM, want none", n, mode, tp.VethB)
	}
	if q := tp.must(tp.B, "tc", "qdisc", "show", "dev", tp.VethB); strings.Contains(q, "clsact") {
		t.Errorf("a clsact qdisc is left at %s after SIGTERM:\n%s", tp.VethB, q)
	}
	return kern, user, r, log
}

// TestFastpathSplit: one policy split across both paths, attached by tcx
// and by tc. The kernel's token bucket and user space's sliding-window log
// each let through, per flow, what the ideal limiter would of the actual
// send times (±5 %); packetshaper's queue decided exactly the user-space
// rule's packets (none of the kernel rule's reached it); SIGTERM leaves no
// program attached (and by tc, no filter nor clsact qdisc).
func TestFastpathSplit(t *testing.T) { forModes(t, testFastpathSplit) }

func testFastpathSplit(t *testing.T, mode string) {
	tp := newTopo(t)
	kern, user, r, log := runFastpath(t, tp, mode)
	if !strings.Contains(log, "shaping") || strings.Contains(log, "fast path off") {
		t.Fatalf("the fast path did not run:\n%s", log)
	}
	if strings.Contains(log, "fast path: ") {
		t.Errorf("a warning about the divert rules rules.sh --fastpath wrote:\n%s", log)
	}
	for port, s := range []sendResult{kern, user} {
		if len(s.Flows) != limFlows {
			t.Fatalf("port %d: sender reports %d flows, want %d", 9000+port, len(s.Flows), limFlows)
		}
		for _, sport := range sortedPorts(s.Flows) {
			checkSent(t, sport, s.Flows[sport].Sent, 1)
		}
	}
	checkSplit(t, "", kern, user, r)
	// The queue saw the user-space rule's packets, all of them, and none
	// of the kernel rule's.
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	var userRecv uint64
	for _, n := range r.Received["9001"] {
		userRecv += n
	}
	// The kernel rule's counters, read from the program's per-CPU
	// counters, are in the stats line beside the user-space rule's.
	var kernRecv uint64
	for _, n := range r.Received["9000"] {
		kernRecv += n
	}
	if p, a := statField(t, line, "rule.kern.packets"), statField(t, line, "rule.kern.accepted"); p != kern.Sent || a != kernRecv {
		t.Errorf("stats: rule.kern.packets=%d accepted=%d; %d sent, %d received", p, a, kern.Sent, kernRecv)
	}
	if acc+drop != user.Sent || acc != userRecv {
		t.Errorf("the queue decided %d packets (accepted %d); the user-space rule's traffic was %d sent, %d received: want equal (no kernel-rule packet in the queue)", acc+drop, acc, user.Sent, userRecv)
	}
}

// TestFastpathRefused: a program the kernel refuses (forced by the test
// variable) is one log line, and the whole policy runs through NFQUEUE:
// both rules limit as they would in user space, every packet reaches the
// queue. With --fastpath-required, packetshaper exits non-zero instead.
func TestFastpathRefused(t *testing.T) {
	needShaper(t)
	parallel(t)
	tp := newTopo(t)
	tp.Env = append(tp.Env, "PACKETSHAPER_TEST_REFUSE_FASTPATH=refused by the test")
	kern, user, r, log := runFastpath(t, tp, "tcx")
	if n := strings.Count(log, "fast path off, the whole policy runs through NFQUEUE: the kernel refused the fast path program: refused by the test"); n != 1 {
		t.Errorf("%d fallback log lines, want 1:\n%s", n, log)
	}
	checkSplit(t, "", kern, user, r)
	// Every packet of both rules reached the queue (and, the punt-all
	// program marking every packet, a few of the link's own: IPv6
	// neighbour discovery, which no rule matches).
	_, _, line := finalStats(t, log)
	if k, u := statField(t, line, "rule.kern.packets"), statField(t, line, "rule.user.packets"); k != kern.Sent || u != user.Sent {
		t.Errorf("the queue decided %d packets of the kernel rule and %d of the user-space rule; %d and %d were sent: want all", k, u, kern.Sent, user.Sent)
	}
	pol := filepath.Join(t.TempDir(), "p.toml")
	os.WriteFile(pol, []byte(fastpathPolicy), 0o644)
	p := tp.start(tp.B, "packetshaper", shaperBin, "--queue", "1", "--policy", pol, "--fastpath", tp.VethB, "--fastpath-required", "--control-socket", "")
	if err := p.wait(10 * time.Second); err == nil || !strings.Contains(p.err.String(), "--fastpath-required: the kernel refused") {
		t.Errorf("--fastpath-required with a refused program: %v, %q; want a non-zero exit naming the refusal", err, p.err.String())
	}
}

// TestFastpathReload: SIGHUP swaps in a new program (tcx link update, tc
// filter replace); the kernel rule, its settings unchanged, keeps its
// flows' buckets (no fresh burst), and its counters go on from the old
// program's.
func TestFastpathReload(t *testing.T) { forModes(t, testFastpathReload) }

func testFastpathReload(t *testing.T, mode string) {
	tp := newTopo(t)
	// A slow refill and a big burst: a fresh bucket would pass 50 of a
	// flow's packets at once, the kept one about 1 per second since.
	pol, _ := tp.divertFastpath(udpRule("kern", "9000", 1, 50))
	sh := tp.startFastpathShaper(pol, "--fastpath-attach", mode, "--control-socket", "")
	phase := func() (sent, got uint64) {
		rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "1s")
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "200ms")
		r := recvDone(rc, 25*time.Second)
		return s.Sent, r.Total
	}
	sent1, got1 := phase()
	if got1 < 45 || got1 > 55 {
		t.Fatalf("before the reload: %d of %d packets passed, want the burst, 50 (±5)", got1, sent1)
	}
	t0 := time.Now()
	sh.signal(syscall.SIGHUP)
	sh.waitStderr("fast path reloaded", 10*time.Second)
	if !strings.Contains(sh.err.String(), "kept_flows=[kern]") {
		t.Errorf("the reload did not keep rule kern's flows:\n%s", sh.err.String())
	}
	sent2, got2 := phase()
	// The refill since the first phase, plus slack for the phase's own
	// length: far below a fresh burst.
	if max := uint64(time.Since(t0).Seconds()) + 5; got2 > max {
		t.Errorf("after the reload: %d of %d packets passed, want at most %d: the bucket was not kept (a fresh one passes 50)", got2, sent2, max)
	}
	if n := attached(t, tp, mode); n != 1 {
		t.Errorf("after the reload, %d programs attached by %s, want 1", n, mode)
	}
	log := tp.stopShaper(sh)
	_, _, line := finalStats(t, log)
	if p, a := statField(t, line, "rule.kern.packets"), statField(t, line, "rule.kern.accepted"); p != sent1+sent2 || a != got1+got2 {
		t.Errorf("stats after the reload: rule.kern.packets=%d accepted=%d; want %d sent and %d received over both programs", p, a, sent1+sent2, got1+got2)
	}
}

// TestFastpathRulesScript: rules.sh add --fastpath writes the one divert
// rule of the fast path (mangle PREROUTING, the punt mark, bypass) and,
// after it, the socket-match rule that keeps defragmentation on without
// connection tracking, once however often it is added (--conntrack: the
// divert rule with the conntrack match instead, no second rule); list
// shows it; del and del --all remove both, del --fastpath also the rule
// it wrote before issue 27; it refuses the options that would queue other
// packets.
func TestFastpathRulesScript(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	mangle := func() string { return tp.must(tp.B, "iptables", "-w", "-t", "mangle", "-S", "PREROUTING") }
	for range 2 {
		tp.rules("add", "--fastpath", "--queue", "3")
	}
	got := mangle()
	const want = `-A PREROUTING -m mark --mark 0x40000000/0x40000000 -m comment --comment "packetshaper queue=3 fastpath" -j NFQUEUE --queue-num 3 --queue-bypass
-A PREROUTING -m mark --mark 0x40000000/0x40000000 -m socket -m comment --comment "packetshaper fastpath-defrag"`
	if strings.Count(got, "packetshaper") != 2 || !strings.Contains(got, want) {
		t.Errorf("mangle PREROUTING after add --fastpath twice:\n%s\nwant, in this order,\n%s", got, want)
	}
	tp.rules("del", "--fastpath", "--queue", "3")
	tp.rules("add", "--fastpath", "--conntrack", "--queue", "3")
	got = mangle()
	const wantCt = `-A PREROUTING -m mark --mark 0x40000000/0x40000000 -m conntrack --ctstate INVALID,NEW,RELATED,ESTABLISHED,UNTRACKED -m comment --comment "packetshaper queue=3 fastpath conntrack" -j NFQUEUE --queue-num 3 --queue-bypass`
	if strings.Count(got, "packetshaper") != 1 || !strings.Contains(got, wantCt) {
		t.Errorf("mangle PREROUTING after add --fastpath --conntrack:\n%s\nwant one\n%s", got, wantCt)
	}
	tp.rules("del", "--fastpath", "--conntrack", "--queue", "3")
	// The rule add --fastpath wrote before issue 27 (the conntrack match,
	// the same comment) goes with del --fastpath.
	tp.must(tp.B, "iptables", "-w", "-t", "mangle", "-I", "PREROUTING", "1", "-m", "mark", "--mark", "0x40000000/0x40000000",
		"-m", "conntrack", "--ctstate", "INVALID,NEW,ESTABLISHED,RELATED,UNTRACKED", "-m", "comment", "--comment", "packetshaper queue=3 fastpath",
		"-j", "NFQUEUE", "--queue-num", "3", "--queue-bypass")
	tp.rules("del", "--fastpath", "--queue", "3")
	if got := mangle(); strings.Contains(got, "packetshaper") {
		t.Errorf("del --fastpath left the rule of before issue 27:\n%s", got)
	}
	tp.rules("add", "--fastpath", "--queue", "3")
	if l := tp.rules("list"); !strings.Contains(l, "fastpath") {
		t.Errorf("list does not show the fast path's rule:\n%s", l)
	}
	tp.rules("del", "--fastpath", "--queue", "3")
	if got := mangle(); strings.Contains(got, "packetshaper") {
		t.Errorf("after del --fastpath:\n%s", got)
	}
	tp.rules("add", "--fastpath", "--queue", "3")
	tp.rules("del", "--all")
	if got := mangle(); strings.Contains(got, "packetshaper") {
		t.Errorf("after del --all:\n%s", got)
	}
	out, err := exec.Command(rulesScript, "add", "--fastpath", "--queue", "0", "--dport", "9000", "--proto", "udp", "--dry-run").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--fastpath takes no") {
		t.Errorf("add --fastpath --dport: %v %s; want a refusal", err, out)
	}
}

// TestFastpathKill: a SIGKILLed packetshaper that attached by tcx leaves
// no program at tcx ingress (its links were never pinned), so traffic
// flows unlimited; and nothing of its eBPF objects: the kernel frees every
// program, map and link it held (asked by their IDs, read from its fdinfo
// while it ran), tc shows no filter at the interface's ingress, /sys/fs/bpf
// holds nothing of it. Attached by tc, the filter (which holds the program
// and its maps) outlives it, the documented bound: the next start removes
// it, with a log line, and its stop leaves nothing.
func TestFastpathKill(t *testing.T) { forModes(t, testFastpathKill) }

func testFastpathKill(t *testing.T, mode string) {
	tp := newTopo(t)
	pol, _ := tp.divertFastpath(fastpathPolicy)
	args := []string{"--fastpath-attach", mode, "--control-socket", ""}
	sh := tp.startFastpathShaper(pol, args...)
	if n := attached(t, tp, mode); n != 1 {
		t.Fatalf("%d programs attached by %s while packetshaper runs, want 1", n, mode)
	}
	held := bpfObjectsOf(t, sh.cmd.Process.Pid)
	if len(held.progs) == 0 || len(held.maps) == 0 || mode == "tcx" && len(held.links) == 0 {
		t.Fatalf("packetshaper holds %s: want its program, maps and link", held)
	}
	t.Logf("packetshaper holds %s", held)
	sh.signal(syscall.SIGKILL)
	if err := sh.wait(10 * time.Second); err == nil {
		t.Fatalf("packetshaper survived SIGKILL")
	}
	if mode == "tc" {
		// The filter outlives the process, and limits still.
		time.Sleep(500 * time.Millisecond)
		if n := attached(t, tp, mode); n != 1 {
			t.Fatalf("%d tc filters of packetshaper after SIGKILL, want the one it left", n)
		}
		rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "1s")
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10001", "--pps", "500", "--duration", "200ms")
		r := recvDone(rc, 25*time.Second)
		t.Logf("after SIGKILL the filter left passed %d of %d packets", r.Total, s.Sent)
		if r.Total >= s.Sent {
			t.Errorf("the filter left by SIGKILL passed %d of %d packets: it should still limit", r.Total, s.Sent)
		}
		// The next start removes it, says so, and attaches its own.
		sh2 := tp.startFastpathShaper(pol, args...)
		if n := strings.Count(sh2.err.String(), "removed the tc filter a previous packetshaper left"); n != 1 {
			t.Errorf("the next start logged %d removals of the filter left, want 1:\n%s", n, indent(sh2.err.String()))
		}
		if n := attached(t, tp, mode); n != 1 {
			t.Errorf("%d tc filters of packetshaper with the next one running, want its own only", n)
		}
		tp.stopShaper(sh2)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return attached(t, tp, mode) == 0 },
		"a program is still attached at ingress after packetshaper stopped")
	// The kernel frees an object once its last reference goes (deferred
	// work): eventually.
	if !testutil.WaitFor(t, 10*time.Second, func() bool { return bpfLeft(t, held).empty() }) {
		t.Errorf("10 s after SIGKILL the kernel still has %s of the %s packetshaper held", bpfLeft(t, held), held)
	}
	if out := tp.must(tp.B, "tc", "filter", "show", "dev", tp.VethB, "ingress"); strings.TrimSpace(out) != "" {
		t.Errorf("tc filter show dev %s ingress after SIGKILL:\n%s", tp.VethB, out)
	}
	if q := tp.must(tp.B, "tc", "qdisc", "show", "dev", tp.VethB); strings.Contains(q, "clsact") {
		t.Errorf("a clsact qdisc is left at %s:\n%s", tp.VethB, q)
	}
	if left := bpffsEntries(t); len(left) != 0 {
		t.Errorf("/sys/fs/bpf after SIGKILL: %v", left)
	}
	// The kernel rule no longer limits: a burst far over it all arrives.
	rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "1s")
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "200ms")
	if r := recvDone(rc, 25*time.Second); r.Total != s.Sent {
		t.Errorf("after SIGKILL: %d of %d packets arrived, want all", r.Total, s.Sent)
	}
}
