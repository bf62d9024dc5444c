package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestFailOpenKill: SIGKILL packetshaper mid-stream, once the traffic has
// been going through its queue; the rule's bypass flag lets the traffic
// keep flowing once the queue has no listener.
func TestFailOpenKill(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp, sh := newShaper9000(t, "ipv4", "--pps", "1000000", "--burst", "1000000")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	// 2 flows × 500 packets/s × 3 s.
	sp := tp.startSend("--dst", tp.IPB+":9000", "--flows", "2", "--pps", "500", "--duration", "3s")
	// Kill only once a few hundred packets went through the queue (and so
	// through packetshaper): the traffic after the kill then really is the
	// fail-open path, not traffic that never was queued.
	const queuedBeforeKill = 300
	deadline := time.Now().Add(5 * time.Second)
	var q0 queueState
	readAt := time.Now()
	for q0 = tp.queue(0); q0.IDSequence < queuedBeforeKill; q0 = tp.queue(0) {
		if sp.exited() || time.Now().After(deadline) {
			t.Fatalf("only %d packets went through queue 0 (sender exited: %v), want %d before the kill", q0.IDSequence, sp.exited(), queuedBeforeKill)
		}
		time.Sleep(10 * time.Millisecond)
		readAt = time.Now()
	}
	sh.signal(syscall.SIGKILL)
	_ = sh.wait(5 * time.Second)
	killedAt := time.Now()
	if q := tp.queue(0); q.Bound {
		t.Errorf("queue 0 still bound after SIGKILL: %+v", q)
	}
	s := sendDone(sp)
	r := recvDone(rc, 10*time.Second)
	// Packets held in the queue at the kill are lost (the kernel drops what
	// a dead listener held), none other: at most those waiting at the last
	// look before the kill, those sent (1000/s) from that look to the
	// kill's end, and a handful. A handful when the shaper keeps up; on a
	// loaded machine its backlog is what the queue's counter showed.
	sentMeanwhile := uint64(1000*killedAt.Sub(readAt).Seconds()) + 1
	if lost := int64(s.Sent) - int64(r.Total); lost > int64(q0.Waiting+sentMeanwhile+50) {
		t.Errorf("sent %d, received %d: %d lost, more than the %d waiting in the queue at the last look before the kill, the %d sent from then to the kill and 50: traffic did not keep flowing after SIGKILL",
			s.Sent, r.Total, lost, q0.Waiting, sentMeanwhile)
	}
	if last := time.Unix(0, r.LastNs); last.Sub(killedAt) < time.Second {
		t.Errorf("last packet arrived %v after the kill, want the traffic of the remaining ~2 s", last.Sub(killedAt))
	}
	t.Logf("sent %d, received %d; %d had gone through the queue before the kill, %d waiting at the last look, %v before the kill's end", s.Sent, r.Total, q0.IDSequence, q0.Waiting, killedAt.Sub(readAt))
}

// TestFailOpenStop: a stopped (SIGSTOP) packetshaper holds at most
// queue-maxlen packets; beyond that the kernel's fail-open flag accepts
// packets. After SIGCONT it gives the held packets their verdict (ACCEPT
// under a high limit), so in the end everything arrives.
//
// It waits for conditions, not for fixed times: for every thread of
// packetshaper to be stopped before sending, for the queue to hold
// queue-maxlen packets, for it to be empty after SIGCONT, and for the
// receiving namespace's sockets to have been read every datagram sent
// before stopping the receiver (each within a bound, a failure past it).
func TestFailOpenStop(t *testing.T) {
	parallel(t)
	needShaper(t)
	const maxlen = 64
	tp, sh := newShaper9000(t, "ipv4", "--pps", "1000000", "--burst", "1000000", "--queue-maxlen", "64")
	rc := tp.startRecv(":9000", "--duration", "30s")
	readBefore := tp.udpInDatagrams(tp.B)
	sh.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = sh.cmd.Process.Signal(syscall.SIGCONT) })
	waitStopped(t, sh, 5*time.Second)

	s := tp.send("--dst", tp.IPB+":9000", "--flows", "2", "--pps", "500", "--duration", "2s")
	// The last packets sent may still be on their way through the veth.
	q := tp.waitQueue(0, 5*time.Second, func(q queueState) bool { return q.Waiting == maxlen })
	if q.Waiting != maxlen {
		t.Errorf("while stopped: %d packets waiting in the queue, want queue-maxlen %d (%+v)", q.Waiting, maxlen, q)
	}
	sh.signal(syscall.SIGCONT)
	if q := tp.waitQueue(0, 10*time.Second, func(q queueState) bool { return q.Waiting == 0 }); q.Waiting != 0 {
		t.Errorf("10 s after SIGCONT: %d packets still waiting", q.Waiting)
	}
	// The receiver stops reading at SIGTERM: wait until the namespace's
	// UDP sockets have been read as many datagrams as were sent (psend
	// recv is the only UDP socket in B), or 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for n := tp.udpInDatagrams(tp.B) - readBefore; n < s.Sent; n = tp.udpInDatagrams(tp.B) - readBefore {
		if time.Now().After(deadline) {
			t.Logf("after 10 s the receiver has read %d of the %d datagrams sent", n, s.Sent)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := stopRecv(rc)
	if r.Total != s.Sent {
		t.Errorf("sent %d, received %d: want all (held packets accepted after SIGCONT, the rest failed open)", s.Sent, r.Total)
	}
	tp.stopShaper(sh)
	t.Logf("sent %d, received %d, held while stopped %d", s.Sent, r.Total, q.Waiting)
}

// TestCleanStop: SIGTERM mid-stream while packetshaper is dropping.
// Every packet gets a verdict: packetshaper exits 0 within a second, and
// sent == received + dropped as logged in its final stats line. (Once the
// queue is unbound /proc shows nothing waiting whatever happened, so that
// equation is the proof that no packet was left unanswered: one the kernel
// discarded at the unbind would be missing from both sides.) A receive
// buffer overflow would break the equation too: the receiving namespace's
// UDP RcvbufErrors counter tells it apart. It also checks the periodic
// stats log (--stats-interval) and the fields of the final stats line.
func TestCleanStop(t *testing.T) {
	needShaper(t)
	tp, sh := newShaper9000(t, "ipv4", "--pps", fmt.Sprint(limRate), "--burst", fmt.Sprint(limBurst), "--stats-interval", "200ms")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	rcvbufBefore := tp.udpRcvbufErrors(tp.B)
	// 8 flows × 1000 packets/s for 3 s: most are dropped.
	sp := tp.startSend("--dst", tp.IPB+":9000", "--flows", "8", "--pps", "1000", "--duration", "3s")
	time.Sleep(1500 * time.Millisecond)
	log := tp.stopShaper(sh)
	s := sendDone(sp)
	r := recvDone(rc, 10*time.Second)
	overflow := tp.udpRcvbufErrors(tp.B) - rcvbufBefore
	t.Logf("UDP RcvbufErrors in %s: %d before, +%d", tp.B, rcvbufBefore, overflow)
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	t.Logf("sent %d, received %d, packetshaper accepted %d dropped %d", s.Sent, r.Total, acc, drop)
	checkStatsLog(t, log)
	if drop == 0 {
		t.Errorf("packetshaper dropped nothing: the test needs it to be limiting when stopped")
	}
	if overflow != 0 {
		t.Errorf("the receiver's socket buffer overflowed: the kernel dropped %d datagrams (UDP RcvbufErrors in %s); sent %d, received %d, dropped by packetshaper %d",
			overflow, tp.B, s.Sent, r.Total, drop)
	} else if r.Total+drop != s.Sent {
		t.Errorf("sent %d != received %d + dropped %d (diff %d): packets went unanswered", s.Sent, r.Total, drop, int64(s.Sent)-int64(r.Total+drop))
	}
}

// statsFields are counters the final stats line must carry (it carries
// every counter, 0 or not).
var statsFields = []string{"accepted=", "dropped=", "flows=", "queue_drops=", "enobufs="}

// zeroField is a counter at 0 (not a time in µs, which may round to 0).
var zeroField = regexp.MustCompile(`\s([a-z0-9_.-]+)=0(\s|$)`)

// checkStatsLog checks a log of packetshaper run with --stats-interval well
// below its run time: at least one periodic "stats" line that saw traffic,
// each carrying only what moved (no counter at 0), and a "final stats" line
// last with every field of statsFields.
func checkStatsLog(t *testing.T, log string) {
	t.Helper()
	var periodic, final []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		switch {
		case strings.Contains(l, "msg=stats "):
			periodic = append(periodic, l)
		case strings.Contains(l, `msg="final stats"`):
			final = append(final, l)
		}
	}
	if len(periodic) == 0 {
		t.Errorf("no periodic msg=stats line with --stats-interval 200ms:\n%s", indent(log))
	}
	busy := false
	for _, l := range periodic {
		for _, m := range zeroField.FindAllStringSubmatch(l, -1) {
			if !strings.HasSuffix(m[1], "_us") {
				t.Errorf("periodic stats line with %s=0 (it carries only the counters not 0): %s", m[1], l)
			}
		}
		busy = busy || strings.Contains(l, " accepted=")
	}
	if len(periodic) > 0 && !busy {
		t.Errorf("no periodic stats line counts packets accepted, though traffic was flowing:\n%s", indent(strings.Join(periodic, "\n")))
	}
	if len(final) != 1 {
		t.Fatalf("%d final stats lines, want 1:\n%s", len(final), indent(log))
	}
	for _, f := range statsFields {
		if !strings.Contains(final[0], " "+f) {
			t.Errorf("final stats line without %s: %s", f, final[0])
		}
	}
	t.Logf("%d periodic stats lines; final: %s", len(periodic), final[0])
}

// TestFailClosedStop: with --fail-closed a stopped packetshaper's full
// queue drops what does not fit, nothing passes unlimited, and the final
// stats count every such drop as queue_drops (read before the unbind).
func TestFailClosedStop(t *testing.T) {
	parallel(t)
	needShaper(t)
	const maxlen = 64
	tp, sh := newShaper9000(t, "ipv4", "--pps", "1000000", "--burst", "1000000", "--queue-maxlen", fmt.Sprint(maxlen), "--fail-closed")
	rc := tp.startRecv(":9000", "--duration", "30s")
	sh.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = sh.cmd.Process.Signal(syscall.SIGCONT) })
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "2", "--pps", "500", "--duration", "2s")
	time.Sleep(300 * time.Millisecond)
	sh.signal(syscall.SIGCONT)
	time.Sleep(time.Second)
	r := stopRecv(rc)
	log := tp.stopShaper(sh)
	if r.Total != maxlen {
		t.Errorf("received %d, want the %d packets the queue held (the rest dropped, none passed unlimited)", r.Total, maxlen)
	}
	qd := regexp.MustCompile(`final stats.*\squeue_drops=(\d+)`).FindStringSubmatch(log)
	if qd == nil {
		t.Fatalf("no queue_drops in the final stats:\n%s", indent(log))
	}
	if n, _ := strconv.ParseUint(qd[1], 10, 64); n != s.Sent-maxlen {
		t.Errorf("final queue_drops = %d, want sent %d - held %d = %d", n, s.Sent, maxlen, s.Sent-maxlen)
	}
	if fo := regexp.MustCompile(`final stats.*failopen_passed=0\s`).MatchString(log); !fo {
		t.Errorf("fail-closed: failopen_passed should be 0:\n%s", indent(log))
	}
}

// waitStopped waits up to d until every thread of p is stopped (state T in
// /proc/PID/task/*/stat): a SIGSTOP takes effect asynchronously.
func waitStopped(t *testing.T, p *proc, d time.Duration) {
	t.Helper()
	pid := p.cmd.Process.Pid
	deadline := time.Now().Add(d)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		running := []string{}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // a thread that just exited
			}
			// "TID (comm) S ...": the state follows the last ')'.
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] != 'T' && st[i+2] != 't' {
				running = append(running, fmt.Sprintf("%s: %c", filepath.Base(filepath.Dir(f)), st[i+2]))
			}
		}
		if err == nil && len(tasks) > 0 && len(running) == 0 {
			return
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) not stopped within %v after SIGSTOP (exited: %v); threads not stopped: %v", p.name, pid, d, p.exited(), running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQueue polls queue q in B until ok says yes or d has passed, and
// returns the last state read.
func (tp *topo) waitQueue(q int, d time.Duration, ok func(queueState) bool) queueState {
	tp.t.Helper()
	var s queueState
	testutil.WaitFor(tp.t, d, func() bool { s = tp.queue(q); return ok(s) })
	return s
}

// udpInDatagrams reads how many UDP datagrams (IPv4 and IPv6) sockets in ns
// have been read: the kernel counts InDatagrams when a socket's owner
// receives one, not when it is queued.
func (tp *topo) udpInDatagrams(ns string) uint64 {
	tp.t.Helper()
	sum := tp.udpSNMP(ns, "InDatagrams")
	found := 1
	for _, l := range strings.Split(tp.must(ns, "cat", "/proc/net/snmp6"), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "Udp6InDatagrams" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				tp.t.Fatalf("/proc/net/snmp6 in %s: Udp6InDatagrams %q: %v", ns, f[1], err)
			}
			sum += n
			found++
		}
	}
	if found != 2 {
		tp.t.Fatalf("no Udp InDatagrams and Udp6InDatagrams counters in %s's /proc/net/snmp and snmp6", ns)
	}
	return sum
}
