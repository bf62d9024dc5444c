package e2e

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bucket is an ideal token bucket (full at the first packet) for the
// expectations of the policy tests; reset makes it full again with new
// parameters at a given time (a rule that starts afresh at a reload).
type bucket struct {
	rate, burst float64
	tokens      float64
	last        int64 // ns
	started     bool
}

func (b *bucket) allow(ns int64) bool {
	if !b.started {
		b.tokens, b.last, b.started = b.burst, ns, true
	}
	b.tokens = math.Min(b.burst, b.tokens+b.rate*float64(ns-b.last)/1e9)
	b.last = ns
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// sendTimes returns the absolute send times (ns) of the given flows of a
// sender's result (psend --times), merged in order.
func sendTimes(s sendResult, ports ...string) []int64 {
	var ts []int64
	for _, p := range ports {
		f := s.Flows[p]
		for _, us := range f.TimesUs {
			ts = append(ts, f.FirstNs+us*1000)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// ruleStat reads rule.NAME.FIELD=N from packetshaper's last stats line.
func ruleStat(t *testing.T, log, rule, field string) uint64 {
	t.Helper()
	re := regexp.MustCompile(`\brule\.` + regexp.QuoteMeta(rule) + `\.` + field + `=(\d+)`)
	m := re.FindAllStringSubmatch(log, -1)
	if m == nil {
		t.Fatalf("no rule.%s.%s in packetshaper's log:\n%s", rule, field, indent(log))
	}
	n, _ := strconv.ParseUint(m[len(m)-1][1], 10, 64)
	return n
}

// TestPolicyClasses runs a four-class policy (docs/configuration.md) on
// real traffic: an allowlist that is never limited, a class limited per
// source /24 with one bucket for all its flows, a shadow rule that accepts
// everything but counts what it would drop, and a fixed-window catch-all
// per 5-tuple. Each class is checked against its rule.
func TestPolicyClasses(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	writePolicy(t, pol, fmt.Sprintf(`
[[rule]]
name   = "mgmt"
match  = { src = ["%s/32", "fd00:9::/32"], proto = ["udp"], dport = ["2222", "8000-8100"] }
action = "accept"

[[rule]]
name  = "dns"
match = { proto = ["udp"], dport = ["53"] }
key   = "src"
src-prefix4 = 24
pps   = 10
burst = 2

[[rule]]
name  = "web-trial"
match = { proto = ["udp"], dport = ["8443"] }
pps   = 5
mode  = "shadow"

[[rule]]
name  = "rest"
algo  = "fixed-window"
pps   = 20
`, tp.IPA))
	tp.rules("add", "--queue", "0", "--proto", "udp", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0", "--policy", pol)
	ports := []string{"2222", "8050", "53", "8443", "9000"}
	var dsts, listen []string
	for _, p := range ports {
		dsts = append(dsts, tp.IPB+":"+p)
		listen = append(listen, ":"+p)
	}
	rc := tp.startRecv(strings.Join(listen, ","), "--duration", "30s", "--idle", "3s")
	s := tp.send("--dst", strings.Join(dsts, ","), "--flows", "4", "--sport", "10000", "--pps", "200",
		"--duration", "3s", "--window", "1s", "--times", "--align", "1s")
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)

	flowsOf := sortedPorts(s.Flows)
	var total = map[string]uint64{}
	for _, p := range ports {
		for _, sp := range flowsOf {
			total[p] += r.Received[p][sp]
		}
	}
	// mgmt: every packet, on both of its ports.
	perDst := func(sp string) uint64 { return s.Flows[sp].Sent / uint64(len(ports)) }
	for _, p := range []string{"2222", "8050"} {
		for _, sp := range flowsOf {
			if got, sent := r.Received[p][sp], perDst(sp); got != sent {
				t.Errorf("mgmt (accept) port %s flow %s: %d of %d arrived", p, sp, got, sent)
			}
		}
	}
	// dns: one bucket for the whole /24 (all four flows).
	var b = bucket{rate: 10, burst: 2}
	var want float64
	for _, ns := range sendTimes(s, flowsOf...) {
		if b.allow(ns) {
			want++
		}
	}
	checkWithin(t, "dns (one bucket per source /24, all flows together)", float64(total["53"]), want, 0.10)
	// web-trial: shadow, everything arrives, the would-be drops counted.
	var shadowWant float64
	for _, sp := range flowsOf {
		if got, sent := r.Received["8443"][sp], perDst(sp); got != sent {
			t.Errorf("web-trial (shadow) flow %s: %d of %d arrived", sp, got, sent)
		}
		b := bucket{rate: 5, burst: 5}
		for _, ns := range sendTimes(s, sp) {
			if !b.allow(ns) {
				shadowWant++
			}
		}
	}
	checkWithin(t, "web-trial shadow_dropped", float64(ruleStat(t, log, "web-trial", "shadow_dropped")), shadowWant, 0.05)
	if d := ruleStat(t, log, "web-trial", "dropped"); d != 0 {
		t.Errorf("shadow rule dropped %d packets", d)
	}
	// rest: fixed window of 20 per second per 5-tuple. Each packet of a
	// flow goes to all five ports, and the sender counts it once in its
	// window: the window's count per destination.
	for _, sp := range flowsOf {
		var w float64
		for _, c := range s.Flows[sp].Windows {
			w += math.Min(float64(c), 20)
		}
		checkWithin(t, "rest (fixed window) flow "+sp, float64(r.Received["9000"][sp]), w, 0.10)
	}
	if u := ruleStat(t, log, "mgmt", "dropped"); u != 0 {
		t.Errorf("mgmt dropped %d", u)
	}
}

// TestPolicyMark: on-exceed = "mark" accepts the packets over the limit
// with the mark set, and a later nft rule (input hook, after the queue)
// sees exactly that many marked packets.
func TestPolicyMark(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	for _, args := range [][]string{
		{"nft", "add", "table", "inet", "psmark"},
		{"nft", "add", "chain", "inet", "psmark", "in", "{ type filter hook input priority 10; }"},
		{"nft", "add", "rule", "inet", "psmark", "in", "udp", "dport", "9000", "meta", "mark", "and", "0x10", "==", "0x10", "counter"},
	} {
		tp.must(tp.B, args...)
	}
	pol := filepath.Join(t.TempDir(), "policy.toml")
	writePolicy(t, pol, `
[[rule]]
name      = "marking"
pps       = 100
burst     = 5
on-exceed = "mark"
set-mark  = "0x10/0x10"
`)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0", "--policy", pol)
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s := tp.send(limitSendArgs(tp.IPB + ":9000")...)
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)
	var sent, got uint64
	for _, sp := range sortedPorts(s.Flows) {
		sent += s.Flows[sp].Sent
		got += r.Received["9000"][sp]
	}
	if got != sent {
		t.Errorf("%d of %d packets arrived: marking must not drop", got, sent)
	}
	out := tp.must(tp.B, "nft", "list", "chain", "inet", "psmark", "in")
	m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in:\n%s", out)
	}
	seen, _ := strconv.ParseUint(m[1], 10, 64)
	marked := ruleStat(t, log, "marking", "marked")
	if seen != marked || marked == 0 {
		t.Errorf("nft saw %d packets with mark 0x10, packetshaper marked %d: want equal and > 0", seen, marked)
	}
	var over float64
	for _, sp := range sortedPorts(s.Flows) {
		b := bucket{rate: limRate, burst: limBurst}
		for _, ns := range sendTimes(s, sp) {
			if !b.allow(ns) {
				over++
			}
		}
	}
	checkWithin(t, "marked packets vs an ideal bucket's excess", float64(marked), over, 0.05)
}

// TestPolicyReload: two rules, each flow sending far above its rate. A
// SIGHUP with the file unchanged grants no fresh burst (each flow gets about
// burst + rate × duration in all); a later reload that changes one rule's
// rate starts that rule afresh and keeps the other's state.
func TestPolicyReload(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	text := func(bRate float64) string { return udpRule("a", "9000", 50, 100) + udpRule("b", "9001", bRate, 100) }
	writePolicy(t, pol, text(50))
	tp.rules("add", "--queue", "0", "--proto", "udp", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0", "--policy", pol)
	rc := tp.startRecv(":9000,:9001", "--duration", "30s", "--idle", "3s")
	snd := tp.startSend("--dst", tp.IPB+":9000,"+tp.IPB+":9001", "--flows", "2", "--sport", "10000", "--pps", "400",
		"--duration", "4.5s", "--times")
	time.Sleep(1500 * time.Millisecond)
	sh.signal(syscall.SIGHUP) // unchanged
	sh.waitStderr("kept_state=a,b", 5*time.Second)
	time.Sleep(1500 * time.Millisecond)
	writePolicy(t, pol, text(100))
	reload2 := time.Now().UnixNano()
	sh.signal(syscall.SIGHUP) // b changes
	sh.waitStderr("kept_state=a\n", 5*time.Second)
	s := sendDone(snd)
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)
	if strings.Count(log, "reloaded") != 2 {
		t.Errorf("want two reloaded lines in the log:\n%s", indent(log))
	}
	for _, sp := range sortedPorts(s.Flows) {
		ts := sendTimes(s, sp)
		// a: one bucket over the whole run, never refilled by a reload.
		ba := bucket{rate: 50, burst: 100}
		var wantA float64
		for _, ns := range ts {
			if ba.allow(ns) {
				wantA++
			}
		}
		gotA := float64(r.Received["9000"][sp])
		checkWithin(t, "rule a flow "+sp+" across two reloads (no fresh burst)", gotA, wantA, 0.07)
		if gotA > wantA+50 {
			t.Errorf("rule a flow %s got %.0f, a fresh burst over the %.0f of one bucket", sp, gotA, wantA)
		}
		// b: fresh and full at the second reload, at the new rate.
		bb := bucket{rate: 50, burst: 100}
		var wantB float64
		for _, ns := range ts {
			if ns >= reload2 && bb.rate == 50 {
				bb = bucket{rate: 100, burst: 100}
			}
			if bb.allow(ns) {
				wantB++
			}
		}
		checkWithin(t, "rule b flow "+sp+" (fresh at the changing reload)", float64(r.Received["9001"][sp]), wantB, 0.07)
	}
}
