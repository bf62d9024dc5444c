package e2e

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The traffic of the limiting tests: 4 UDP flows at 500 packets/s each for
// 3 s, limited to 100 packets/s per flow with a burst of 5.
const (
	limFlows    = 4
	limPPS      = 500
	limDuration = 3 * time.Second
	limRate     = 100.0
	limBurst    = 5.0
)

// limLiteral is the figure for what each flow gets through:
// burst + rate × duration.
var limLiteral = limBurst + limRate*limDuration.Seconds()

func limitSendArgs(dsts ...string) []string {
	return []string{"--dst", strings.Join(dsts, ","), "--flows", strconv.Itoa(limFlows), "--sport", "10000",
		"--pps", strconv.Itoa(limPPS), "--duration", limDuration.String(), "--window", "1s", "--times"}
}

// checkSent fails t unless the sender really sent about pps × duration per
// flow and destination (±5 %): the limit checks mean nothing if the sender
// itself stayed below the limit.
func checkSent(t *testing.T, port string, sent uint64, ndst int) {
	t.Helper()
	want := float64(limPPS) * limDuration.Seconds() * float64(ndst)
	if got := float64(sent); math.Abs(got-want) > 0.05*want {
		t.Errorf("flow %s: the sender sent %.0f packets, want %.0f ±5%% (%d/s × %v × %d destination(s))", port, got, want, limPPS, limDuration, ndst)
	}
}

// expectTokenBucket is what an ideal token bucket (full at the first
// packet, refilled at the rate, capacity burst) lets through of a flow whose
// packets were sent at timesUs (µs after the first). For a steady sender far
// above the rate that is burst + rate × duration; replaying the actual send
// times keeps the expectation right when the sender stalls on a loaded
// machine (a stall wastes tokens beyond the burst, for any token bucket: the
// kernel's hashlimit loses them too).
func expectTokenBucket(timesUs []int64) float64 {
	tokens, last, n := limBurst, int64(0), 0
	for _, t := range timesUs {
		tokens = math.Min(limBurst, tokens+limRate*float64(t-last)/1e6)
		last = t
		if tokens >= 1 {
			tokens--
			n++
		}
	}
	return float64(n)
}

// expectFixedWindow is what a fixed window of 1 s aligned to the Unix epoch
// lets through: in each window the flow touched, at most rate×1 s of what was
// sent in it.
func expectFixedWindow(windows map[string]uint64) float64 {
	var n float64
	for _, c := range windows {
		n += math.Min(float64(c), limRate)
	}
	return n
}

// checkWithin reports an error when got is not within frac of want.
func checkWithin(t *testing.T, what string, got, want, frac float64) {
	t.Helper()
	if math.Abs(got-want) > frac*want {
		t.Errorf("%s: got %.0f, want %.1f ±%.0f%%", what, got, want, 100*frac)
	} else {
		t.Logf("%s: got %.0f, want %.1f ±%.0f%%: ok", what, got, want, 100*frac)
	}
}

func sortedPorts[V any](m map[string]V) []string {
	var ps []string
	for p := range m {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func TestLimitTokenBucket(t *testing.T)     { testLimit(t, "token-bucket", "ipv4") }
func TestLimitFixedWindow(t *testing.T)     { testLimit(t, "fixed-window", "ipv4") }
func TestLimitTokenBucketIPv6(t *testing.T) { testLimit(t, "token-bucket", "ipv6") }

// testLimit sends the limiting traffic through packetshaper with algo over
// family (ipv4 or ipv6) and checks each flow's count against what the
// algorithm should let through, and that every packet was decided by
// packetshaper (none bypassed it).
func testLimit(t *testing.T, algo, family string) {
	parallel(t)
	needShaper(t)
	tp, sh := newShaper9000(t, family, "--pps", fmt.Sprint(limRate), "--burst", fmt.Sprint(limBurst), "--algo", algo)
	sendLimited(t, tp, sh, algo, tp.dst9000(family))
}

// sendLimited sends the limiting traffic to dst through the packetshaper sh
// (limiting with algo at limRate and limBurst), stops it, and checks each
// flow's count against what the algorithm should let through, and that
// every packet was decided by packetshaper (none bypassed it).
func sendLimited(t *testing.T, tp *topo, sh *proc, algo, dst string) {
	t.Helper()
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	args := limitSendArgs(dst)
	if algo == "fixed-window" {
		// Start on a window boundary: then the flow touches exactly
		// duration/window windows and the literal figure holds.
		args = append(args, "--align", "1s")
	}
	s := tp.send(args...)
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)

	if len(s.Flows) != limFlows {
		t.Fatalf("sender reports %d flows, want %d", len(s.Flows), limFlows)
	}
	var recvTotal uint64
	for _, port := range sortedPorts(s.Flows) {
		f := s.Flows[port]
		got := r.Received["9000"][port]
		recvTotal += got
		checkSent(t, port, f.Sent, 1)
		var want float64
		switch algo {
		case "token-bucket":
			want = expectTokenBucket(f.TimesUs)
			// The ideal bucket over the actual send times is the same as
			// burst + rate × duration when the sender kept its schedule:
			// it must not be far off, or the sender stalled too much for
			// the test to show anything.
			checkWithin(t, fmt.Sprintf("flow %s: an ideal token bucket over the actual send times vs burst + rate × duration", port), want, limLiteral, 0.10)
			checkWithin(t, fmt.Sprintf("%s flow %s (sent %d)", algo, port, f.Sent), float64(got), want, 0.10)
		case "fixed-window":
			// Σ over the windows the flow touched of min(sent in it,
			// limit), and, since sending started on a window boundary,
			// the literal figure (fixed window has no burst: rate ×
			// duration, 5 below it, well within the tolerance).
			want = expectFixedWindow(f.Windows)
			checkWithin(t, fmt.Sprintf("%s flow %s (sent %d, %d windows): Σ min(sent per window, limit)", algo, port, f.Sent, len(f.Windows)), float64(got), want, 0.10)
			checkWithin(t, fmt.Sprintf("%s flow %s: burst + rate × duration", algo, port), float64(got), limLiteral, 0.10)
		}
	}
	// Every packet went through packetshaper: what it accepted arrived,
	// and it decided all that was sent.
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	if acc != recvTotal || acc+drop != s.Sent {
		t.Errorf("packetshaper accepted %d and dropped %d; sent %d, received %d: want accepted == received and accepted+dropped == sent",
			acc, drop, s.Sent, recvTotal)
	}
}

// TestKernelHashlimit checks the harness itself against the kernel: the
// same traffic through an iptables hashlimit rule with the same rate and
// burst gives each flow burst + rate × duration (±10 %). If this fails, the
// sender or the namespaces are off, not packetshaper.
func TestKernelHashlimit(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	addHashlimit(tp, "9001")
	rc := tp.startRecv(":9001", "--duration", "30s", "--idle", "3s")
	s := tp.send(limitSendArgs(tp.IPB + ":9001")...)
	r := recvDone(rc, 35*time.Second)
	for _, port := range sortedPorts(s.Flows) {
		f := s.Flows[port]
		checkSent(t, port, f.Sent, 1)
		checkWithin(t, "hashlimit flow "+port, float64(r.Received["9001"][port]), expectTokenBucket(f.TimesUs), 0.10)
	}
}

// addHashlimit adds, in B, a hashlimit rule per 5-tuple with the limiting
// tests' rate and burst that drops what is over the limit for UDP to dport.
func addHashlimit(tp *topo, dport string) {
	tp.t.Helper()
	tp.must(tp.B, "iptables", "-w", "-I", "INPUT", "-p", "udp", "--dport", dport,
		"-m", "hashlimit", "--hashlimit-name", "pse"+dport, "--hashlimit-mode", "srcip,dstip,srcport,dstport",
		"--hashlimit-above", fmt.Sprintf("%.0f/sec", limRate), "--hashlimit-burst", fmt.Sprintf("%.0f", limBurst),
		"-j", "DROP")
}

// TestHashlimitAgreement sends each packet of the limiting traffic twice at
// the same instant: to port 9000, queued to packetshaper (token bucket), and
// to port 9001, limited by the kernel's hashlimit with the same rate and
// burst. Per flow, the two counts agree within 5 %.
func TestHashlimitAgreement(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	addHashlimit(tp, "9001")
	sh := tp.startShaper("--queue", "0", "--pps", fmt.Sprint(limRate), "--burst", fmt.Sprint(limBurst), "--algo", "token-bucket")
	rc := tp.startRecv(":9000,:9001", "--duration", "30s", "--idle", "3s")
	s := tp.send(limitSendArgs(tp.IPB+":9000", tp.IPB+":9001")...)
	r := recvDone(rc, 35*time.Second)
	tp.stopShaper(sh)
	for _, port := range sortedPorts(s.Flows) {
		ps, hl := r.Received["9000"][port], r.Received["9001"][port]
		checkWithin(t, "flow "+port+": packetshaper vs hashlimit", float64(ps), float64(hl), 0.05)
		f := s.Flows[port]
		checkSent(t, port, f.Sent, 2)
		checkWithin(t, "flow "+port+": hashlimit", float64(hl), expectTokenBucket(f.TimesUs), 0.10)
	}
}
