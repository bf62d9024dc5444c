package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// The shaping rule's max-delay; the global rule's rate and burst. The
// global rule is keyed by destination, one key for its sender's 4 flows
// (2000 packets/s offered), at TestGlobalLimit's proportions: a burst of
// 0.2 s of the rate, global-slack 0.1. The host takes a key's budget in
// leases asked for in the background, about one ask per lease: a key of
// 100/s with a 50 ms bucket (the limiting tests' per-flow limit) would
// lose refill whenever an ask comes late on a loaded machine, which a
// token bucket spent packet by packet never does.
const (
	mixMaxDelay    = time.Second
	mixGlobalRate  = 1000.0
	mixGlobalBurst = 0.2 * mixGlobalRate
)

// fastpathMixPolicy: one policy whose rules run on both paths, each at the
// limiting tests' rate per 5-tuple and fed its own traffic: a token bucket
// the kernel runs (UDP to 9000), a shaping token bucket (UDP to 9001: held
// packets, user space only) and a global token bucket through the Redis
// store on B's loopback (UDP to 9002: its budget comes from the store, user
// space only; burst mixGlobalBurst).
var fastpathMixPolicy = fmt.Sprintf(`
[redis]
addrs = ["127.0.0.1:%d"]

[[rule]]
name  = "kern"
match = { proto = ["udp"], dport = ["9000"] }
pps   = %[2]g
burst = %[3]g

[[rule]]
name  = "shape"
match = { proto = ["udp"], dport = ["9001"] }
pps   = %[2]g
burst = %[3]g
shape = true
max-delay = "%[4]s"

[[rule]]
name  = "glob"
match = { proto = ["udp"], dport = ["9002"] }
key   = "dst"
pps   = %[5]g
burst = %[6]g
scope = "global"
global-slack = 0.1
`, gRedis, limRate, limBurst, mixMaxDelay, mixGlobalRate, mixGlobalBurst)

// expectShaped is how many of a flow's packets, sent at sendNs, a shaping
// token bucket of the limiting tests' rate and burst and mixMaxDelay passes
// (the ideal shaper, gcra: the others are over its queue, dropped).
func expectShaped(sendNs []int64) float64 {
	n := 0
	for _, d := range gcra(sendNs, limRate, limBurst, mixMaxDelay) {
		if d >= 0 {
			n++
		}
	}
	return float64(n)
}

// TestFastpathMixed: one policy mixing a kernel rule with the two kinds of
// rule that only user space runs, shaping and global, run with --fastpath
// and rules.sh add --fastpath, the three rules' traffic at once. Each rule
// lets through what its ideal limiter would of the actual send times
// (±5 %), per key: the kernel's token bucket and the shaper's queue per
// flow (the shaper: burst + rate × (duration + max-delay), where a plain
// limit passes burst + rate × duration), the global bucket for its one
// key, through the store. The kernel's counters saw every packet of
// the kernel rule; the queue decided exactly the shaping and global rules'
// packets, none of the kernel rule's.
func TestFastpathMixed(t *testing.T) {
	needShaper(t)
	needRedisServer(t)
	tp := newTopo(t)
	tp.startRedisIn(tp.B, gRedis)
	pol, _ := tp.divertFastpath(fastpathMixPolicy)
	sh := tp.startShaper("--queue", "0", "--policy", pol, "--fastpath", tp.VethB, "--control-socket", "")
	if n := testutil.TCXPrograms(t, tp.B, tp.VethB); n != 1 {
		t.Fatalf("%d programs at tcx ingress of %s while packetshaper runs, want 1\n%s", n, tp.VethB, indent(sh.err.String()))
	}
	// The shaped flows' last packets leave up to max-delay after they
	// were sent: the receiver waits longer than that for them.
	rc := tp.startRecv(":9000,:9001,:9002", "--duration", "40s", "--idle", "3s")
	ps := make([]*proc, 3)
	for i, port := range []string{"9000", "9001", "9002"} {
		// Each sender its own source ports (the last --sport counts).
		ps[i] = tp.startSend(append(limitSendArgs(tp.IPB+":"+port), "--sport", fmt.Sprint(10000+1000*i))...)
	}
	kern, shape, glob := sendDone(ps[0]), sendDone(ps[1]), sendDone(ps[2])
	r := recvDone(rc, 45*time.Second)
	log := tp.stopShaper(sh)
	if !strings.Contains(log, "shaping") || strings.Contains(log, "fast path off") {
		t.Fatalf("the fast path did not run:\n%s", indent(log))
	}
	total := func(port string) (n uint64) {
		for _, v := range r.Received[port] {
			n += v
		}
		return n
	}
	for _, c := range []struct {
		port, rule string
		s          sendResult
		expect     func(sport string, s sendResult) float64
	}{
		{"9000", "kern (kernel, token bucket)", kern, func(sport string, s sendResult) float64 { return expectTokenBucket(s.Flows[sport].TimesUs) }},
		{"9001", "shape (user space, shaping)", shape, func(sport string, s sendResult) float64 { return expectShaped(sendTimes(s, sport)) }},
	} {
		if len(c.s.Flows) != limFlows {
			t.Fatalf("port %s: sender reports %d flows, want %d", c.port, len(c.s.Flows), limFlows)
		}
		for _, sport := range sortedPorts(c.s.Flows) {
			f := c.s.Flows[sport]
			checkSent(t, sport, f.Sent, 1)
			checkWithin(t, fmt.Sprintf("rule %s, port %s flow %s (sent %d)", c.rule, c.port, sport, f.Sent), float64(r.Received[c.port][sport]), c.expect(sport, c.s), 0.05)
		}
	}
	// The global rule: one key, all its sender's flows.
	if len(glob.Flows) != limFlows {
		t.Fatalf("port 9002: sender reports %d flows, want %d", len(glob.Flows), limFlows)
	}
	b, want := bucket{rate: mixGlobalRate, burst: mixGlobalBurst}, 0
	for _, ns := range sendTimes(glob, sortedPorts(glob.Flows)...) {
		if b.allow(ns) {
			want++
		}
	}
	checkWithin(t, fmt.Sprintf("rule glob (user space, global, key dst), port 9002 (sent %d)", glob.Sent), float64(total("9002")), float64(want), 0.05)
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	if p, a := statField(t, line, "rule.kern.packets"), statField(t, line, "rule.kern.accepted"); p != kern.Sent || a != total("9000") {
		t.Errorf("stats: rule.kern.packets=%d accepted=%d; %d sent, %d received", p, a, kern.Sent, total("9000"))
	}
	for _, c := range []struct {
		rule, port string
		s          sendResult
	}{{"shape", "9001", shape}, {"glob", "9002", glob}} {
		if p, a := statField(t, line, "rule."+c.rule+".packets"), statField(t, line, "rule."+c.rule+".accepted"); p != c.s.Sent || a != total(c.port) {
			t.Errorf("stats: rule.%s.packets=%d accepted=%d; %d sent, %d received", c.rule, p, a, c.s.Sent, total(c.port))
		}
	}
	if user := shape.Sent + glob.Sent; acc+drop != user || acc != total("9001")+total("9002") {
		t.Errorf("the queue decided %d packets (accepted %d); the user-space rules' traffic was %d sent, %d received: want equal (no kernel-rule packet in the queue)",
			acc+drop, acc, user, total("9001")+total("9002"))
	}
}
