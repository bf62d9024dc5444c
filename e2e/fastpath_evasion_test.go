package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"golang.org/x/sys/unix"
)

// Issue 26: the ways around the kernel fast path's limits, tried as an
// attacker would against the real binary with --fastpath, in namespaces,
// behind the shipped divert rule (rules.sh add --fastpath). Each test
// counts what arrives against an ideal limiter over the actual send times
// and holds it to the bar: a GSO super-packet costs its segments,
// a link without an Ethernet header is decoded (or refused at start), a
// non-first fragment is charged to its datagram's flow and rule, churn in
// the kernel's flow map buys no fresh bucket, and a reload that moves a
// rule keeps its flows' buckets. This file's helpers start with "ev".

// evStartFastpath writes policy to a file, adds the fast path's divert rule
// in B and starts packetshaper on queue 0 with --fastpath dev (and extra
// flags), without a control socket. It returns the process and the policy
// file (for reloads) once packetshaper logged its startup line, or has
// exited (the caller decides whether that is a refusal it accepts), within
// 40 s (the verifier takes seconds for the program on a loaded machine);
// running, it must have one program at tcx ingress of dev.
func (tp *topo) evStartFastpath(policy, dev string, extra ...string) (*proc, string) {
	tp.t.Helper()
	pol, _ := tp.divertFastpath(policy)
	args := append([]string{shaperBin, "--queue", "0", "--policy", pol, "--fastpath", dev, "--control-socket", ""}, extra...)
	sh := tp.start(tp.B, "packetshaper", args...)
	testutil.WaitFor(tp.t, 40*time.Second, func() bool {
		return strings.Contains(sh.err.String(), "msg=shaping") || sh.exited()
	})
	if sh.exited() {
		return sh, pol
	}
	if !strings.Contains(sh.err.String(), "msg=shaping") {
		tp.t.Fatalf("packetshaper did not log its startup line within 40 s:\n%s", indent(sh.err.String()))
	}
	if strings.Contains(sh.err.String(), "fast path off") {
		tp.t.Fatalf("the fast path did not run:\n%s", indent(sh.err.String()))
	}
	if n := testutil.TCXPrograms(tp.t, tp.B, dev); n != 1 {
		tp.t.Fatalf("%d programs at tcx ingress of %s while packetshaper runs, want 1", n, dev)
	}
	return sh, pol
}

// evMustRun fails the test if packetshaper exited at start.
func evMustRun(t *testing.T, sh *proc) {
	t.Helper()
	if sh.exited() {
		t.Fatalf("packetshaper exited at start: %v\n%s", sh.waitErr, indent(sh.err.String()))
	}
}

// evCheckBar fails t unless got is at most over × want and at least under ×
// want (the bar of the issue above, not starved below), and logs the
// ratio either way; want is an ideal limiter's figure unless what says
// otherwise ("against ...").
func evCheckBar(t *testing.T, what string, got, want, under, over float64) {
	t.Helper()
	r := got / want
	switch {
	case want <= 0:
		t.Errorf("%s: the reference lets %.0f through: the traffic shows nothing", what, want)
	case r > over:
		t.Errorf("%s: %.0f delivered, %.2f× the reference's %.1f: want at most %.2f×", what, got, r, want, over)
	case r < under:
		t.Errorf("%s: %.0f delivered, %.2f× the reference's %.1f: want at least %.2f× (starved)", what, got, r, want, under)
	default:
		t.Logf("%s: %.0f delivered, %.3f× the reference's %.1f (bar %.2f–%.2f×): ok", what, got, r, want, under, over)
	}
}

// evPkt is a packet sent at ns costing cost (bytes or packets).
type evPkt struct {
	ns   int64
	cost float64
}

// evBucket is what an ideal token bucket (full at the first packet,
// rate per second, capacity burst) lets through of packets, in cost: the
// sum of the costs of those it accepts.
func evBucket(pkts []evPkt, rate, burst float64) float64 {
	sort.SliceStable(pkts, func(i, j int) bool { return pkts[i].ns < pkts[j].ns })
	var tokens, got float64
	var last int64
	for i, p := range pkts {
		if i == 0 {
			tokens, last = burst, p.ns
		}
		tokens = math.Min(burst, tokens+rate*float64(p.ns-last)/1e9)
		last = p.ns
		if tokens >= p.cost {
			tokens -= p.cost
			got += p.cost
		}
	}
	return got
}

// evPackets is a sender's packets of flow sport, each costing cost(k) for
// its k-th packet.
func evPackets(s sendResult, sport string, cost func(k int) float64) []evPkt {
	f := s.Flows[sport]
	out := make([]evPkt, 0, len(f.TimesUs))
	for k, us := range f.TimesUs {
		out = append(out, evPkt{f.FirstNs + us*1000, cost(k)})
	}
	return out
}

// evRecvSizes is psend recv's count of datagrams by payload length.
func evRecvSizes(t *testing.T, p *proc) map[string]uint64 {
	t.Helper()
	var r struct {
		Sizes map[string]uint64 `json:"sizes"`
	}
	if err := json.Unmarshal([]byte(p.out.String()), &r); err != nil {
		t.Fatalf("psend recv: %v", err)
	}
	return r.Sizes
}

// evGSOSegs and evGSOSize: each sendmsg of the GSO tests carries 40 datagrams
// of 1 400 bytes (UDP_SEGMENT), at 500 sendmsg/s for 4 s: 80 000
// datagrams of 1 428 bytes of IP, 20 000/s.
const (
	evGSOSegs = 40
	evGSOSize = 1400
	evGSOIP   = 20 + 8 + evGSOSize
)

// TestFastpathGSOWire checks the GSO tests' premise, with no shaper: the
// veth hands B's ingress each sendmsg's datagrams as one GSO packet (seen
// by a packet socket, as by tc, before segmentation: "length 56000", and no
// IP fragment: the capture filter leaves fragments out), and B's socket
// receives them as 40 datagrams each.
func TestFastpathGSOWire(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	td := tp.start(tp.B, "tcpdump", "timeout", "20", "tcpdump", "-i", tp.VethB, "-nn", "-l", "-c", "3", "udp and dst port 9000 and ip[6:2] & 0x3fff = 0")
	td.waitStderr("listening on", 10*time.Second)
	rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "2s")
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--size", fmt.Sprint(evGSOSize),
		"--gso", fmt.Sprint(evGSOSegs), "--pps", "10", "--count", "5", "--duration", "2s")
	r := recvDone(rc, 25*time.Second)
	_ = td.wait(25 * time.Second)
	want := fmt.Sprintf("UDP, length %d", evGSOSegs*evGSOSize)
	if n := strings.Count(td.out.String(), want); n != 3 {
		t.Errorf("tcpdump at %s saw %d packets with %q, want 3 (the GSO packets whole):\n%s", tp.VethB, n, want, indent(td.out.String()))
	}
	if s.Sent != 5*evGSOSegs || r.Received["9000"]["10000"] != 5*evGSOSegs {
		t.Errorf("sent %d, received %d datagrams: want %d and %d", s.Sent, r.Received["9000"]["10000"], 5*evGSOSegs, 5*evGSOSegs)
	}
}

func TestFastpathGSOPackets(t *testing.T) { evGSO(t, false) }
func TestFastpathGSOBytes(t *testing.T)   { evGSO(t, true) }

// evGSO: one 5-tuple sends 40 × 1 400-byte datagrams per sendmsg
// (UDP GSO), 500 sendmsg/s, to a kernel rule of 100 packets/s, burst 5, for
// 8 s (or, bytes, 8mbit with a burst of 56 000 bytes, less than one GSO
// packet's 56 028, for 4 s): the datagrams delivered are at most 1.05× the
// bound burst + rate × T, and at least 0.75× what an ideal limiter gives
// the datagrams over their send times (a GSO packet over the burst is not
// starved). A GSO packet costing more than the burst passes on a full
// bucket and leaves it in debt (docs/fastpath.md), so the program's bound
// is burst + rate × T plus one such packet's excess (40 − 5 = 35
// datagrams): over 8 s that is within 1.05× (840 of the bound's 805 at
// worst), over the 4 s it is not (440 of 405), whichever way a
// sender's stalls fall. On 427b78a a GSO packet is one packet at tc
// ingress: 16 120 of 80 000 in 4 s = 39.8× the bound; with the byte rule
// none ever fits the burst: 0.
func evGSO(t *testing.T, bytes bool) {
	needShaper(t)
	tp := newTopo(t)
	pol := udpRule("gso", "9000", 100, 5)
	if bytes {
		pol = `
[[rule]]
name    = "gso"
match   = { proto = ["udp"], dport = ["9000"] }
bitrate = "8mbit"
burst   = 56000
`
	}
	sh, _ := tp.evStartFastpath(pol, tp.VethB)
	evMustRun(t, sh)
	secs := 8
	if bytes {
		secs = 4
	}
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--size", fmt.Sprint(evGSOSize),
		"--gso", fmt.Sprint(evGSOSegs), "--pps", "500", "--duration", fmt.Sprintf("%ds", secs), "--times")
	r := recvDone(rc, 45*time.Second)
	log := tp.stopShaper(sh)
	if want := 500 * secs * evGSOSegs; math.Abs(float64(s.Sent)-float64(want)) > 0.05*float64(want) {
		t.Errorf("the sender sent %d datagrams, want %d ±5%%", s.Sent, want)
	}
	got := float64(r.Received["9000"]["10000"])
	_, _, line := finalStats(t, log)
	t.Logf("sent %d datagrams in %d GSO packets; rule gso: packets=%d accepted=%d", s.Sent, s.Sent/evGSOSegs,
		statField(t, line, "rule.gso.packets"), statField(t, line, "rule.gso.accepted"))
	// The bar is the issue's: 1.05× the bound burst + rate × T (T the
	// send's span), which the program exceeds by at most one GSO packet's
	// excess over the burst whatever the sender's stalls (above); below, an ideal limiter over the send times (each datagram
	// decided alone, as the queue does) says it is not starved: at least
	// 0.75× of it (a GSO packet over the burst waits for a full bucket, so
	// a loaded sender's stalls cost it more than they cost a per-datagram
	// limiter: 0.86–0.88× at load 15, 0.97× at load 5, with fp-decode).
	rate, burst, cost, what := 100.0, 5.0, 1.0, "GSO datagrams through 100 packets/s, burst 5"
	if bytes {
		rate, burst, cost, what = 1e6, 56000, evGSOIP, "GSO datagrams through 8mbit, burst 56 000 bytes"
	}
	f := s.Flows["10000"]
	bound := (burst + rate*float64(f.LastNs-f.FirstNs)/1e9) / cost
	ideal := evBucket(evPackets(s, "10000", func(int) float64 { return cost }), rate, burst) / cost
	evCheckBar(t, what+", against the bound burst + rate × T", got, bound, 0, 1.05)
	evCheckBar(t, what+", against an ideal limiter over the send times", got, ideal, 0.75, math.Inf(1))
}

// evL3Policy: 10 packets/s per source for UDP to 9000.
const evL3Policy = `
[[rule]]
name  = "src"
match = { proto = ["udp"], dport = ["9000"] }
key   = "src"
pps   = 10
burst = 5
`

// The L3 links' addresses: 69 is 0x45, so that a program reading an IPv4
// header 14 bytes into the packet finds a plausible one (version 4,
// header length 5) in the source address's third byte.
const (
	evL3Src = "10.250.69.1"
	evL3Dst = "10.250.69.2"
)

// TestFastpathTun: a tun device in B (no Ethernet header: at tc ingress the
// IP header is at offset 0) with --fastpath on it, UDP from 10.250.69.1 at
// 500/s for 3 s written into it: at most 1.05× a 10 packets/s bucket per
// source (burst 5), or packetshaper refuses the device at start with one
// line naming it. On 427b78a: 1 501 of 1 501, 42.9×, as garbage flows.
func TestFastpathTun(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	dev := strings.TrimSuffix(tp.VethB, "b") + "t"
	tp.must(tp.B, "ip", "tuntap", "add", "dev", dev, "mode", "tun")
	tp.must(tp.B, "ip", "addr", "add", evL3Dst, "peer", evL3Src+"/32", "dev", dev)
	tp.must(tp.B, "ip", "link", "set", dev, "up")
	tp.must(tp.B, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf."+dev+".rp_filter=0")
	send := func() sendResult {
		return sendDone(tp.start(tp.B, "psend sendtun", psendBin, "sendtun", "--tun", dev, "--src", evL3Src,
			"--dst", evL3Dst+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "3s", "--times"))
	}
	evL3Link(t, tp, dev, send)
}

// TestFastpathTunTunnel: a user-space L3 tunnel between A and B, as
// wireguard-go or OpenVPN make one (this kernel has neither ipip, gre nor
// WireGuard): a tun device in each namespace and the test process copying
// every packet A's kernel routes into A's tun to B's tun, from which B's
// kernel receives it; --fastpath on B's tun, the traffic an ordinary UDP
// socket in A sends from 10.250.69.1 at 500/s for 3 s: the same bar.
func TestFastpathTunTunnel(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	dev := strings.TrimSuffix(tp.VethB, "b") + "w"
	for _, s := range []struct{ ns, addr, peer string }{{tp.A, evL3Src, evL3Dst}, {tp.B, evL3Dst, evL3Src}} {
		tp.must(s.ns, "ip", "tuntap", "add", "dev", dev, "mode", "tun")
		tp.must(s.ns, "ip", "addr", "add", s.addr, "peer", s.peer+"/32", "dev", dev)
		tp.must(s.ns, "ip", "link", "set", dev, "up")
		tp.must(s.ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf."+dev+".rp_filter=0")
	}
	tp.evTunRelay(dev)
	// The tunnel works before packetshaper runs: an echo request reaches
	// B (no reply comes back, the relay is one way).
	_, _ = tp.run(tp.A, "ping", "-c", "1", "-W", "1", evL3Dst)
	if n := tp.evIcmpInEchos(tp.B); n < 1 {
		t.Fatalf("B received %d echo requests through the tunnel, want 1: the relay does not work", n)
	}
	send := func() sendResult {
		return tp.send("--dst", evL3Dst+":9000", "--src", evL3Src, "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "3s", "--times")
	}
	evL3Link(t, tp, dev, send)
}

// evIcmpInEchos reads IcmpInEchos of /proc/net/snmp in ns.
func (tp *topo) evIcmpInEchos(ns string) uint64 {
	tp.t.Helper()
	return tp.snmp(ns, "Icmp:", "InEchos")
}

// evTunRelay attaches to the tun device dev in A and in B (each made with
// ip tuntap add) and copies every packet A's device gives (what A's
// kernel routes into it) to B's device (which B's kernel then receives),
// until the test ends: at most 100 000 packets, polled every 50 ms for
// the stop.
func (tp *topo) evTunRelay(dev string) {
	tp.t.Helper()
	open := func(ns string) int {
		var fd int
		err := testutil.Do(ns, func() error {
			var err error
			fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			ifr, err := unix.NewIfreq(dev)
			if err != nil {
				return err
			}
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		})
		if err != nil {
			tp.t.Fatalf("tun %s in %s: %v", dev, ns, err)
		}
		return fd
	}
	from, to := open(tp.A), open(tp.B)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for n := 0; n < 100000; {
			select {
			case <-stop:
				return
			default:
			}
			pfd := []unix.PollFd{{Fd: int32(from), Events: unix.POLLIN}}
			if k, err := unix.Poll(pfd, 50); err != nil || k == 0 {
				continue
			}
			m, err := unix.Read(from, buf)
			if err != nil {
				continue
			}
			_, _ = unix.Write(to, buf[:m])
			n++
		}
	}()
	tp.t.Cleanup(func() {
		close(stop)
		<-done
		unix.Close(from)
		unix.Close(to)
	})
}

// evL3Link runs evL3Policy with --fastpath dev and the traffic send makes,
// and checks the bar (or the refusal).
func evL3Link(t *testing.T, tp *topo, dev string, send func() sendResult) {
	sh, _ := tp.evStartFastpath(evL3Policy, dev)
	if sh.exited() {
		// A refusal: a non-zero exit whose last line names the device,
		// not a crash.
		log := strings.TrimSpace(sh.err.String() + sh.out.String())
		lines := strings.Split(log, "\n")
		last := lines[len(lines)-1]
		if sh.waitErr == nil || !strings.Contains(last, dev) || strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
			t.Fatalf("packetshaper exited at start (%v) without one line naming %s:\n%s", sh.waitErr, dev, indent(log))
		}
		t.Logf("refused at start, as the issue allows: %s", last)
		return
	}
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s := send()
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)
	if s.Sent < 1400 {
		t.Errorf("the sender sent %d packets, want about 1 500", s.Sent)
	}
	_, _, line := finalStats(t, log)
	t.Logf("%s: sent %d; rule src: packets=%d accepted=%d", dev, s.Sent, statField(t, line, "rule.src.packets"), statField(t, line, "rule.src.accepted"))
	want := evBucket(evPackets(s, "10000", func(int) float64 { return 1 }), 10, 5)
	evCheckBar(t, fmt.Sprintf("UDP from %s on %s through 10 packets/s per source", evL3Src, dev), float64(r.Received["9000"]["10000"]), want, 0, 1.05)
}

// evFragOtherPolicy: a ping rule and a DNS rule, each 10/s per source; the
// fragmented datagrams go to UDP 9000, which no rule limits.
const evFragOtherPolicy = `
[[rule]]
name  = "ping"
match = { proto = ["icmp", "icmpv6"] }
key   = "src"
pps   = 10

[[rule]]
name  = "dns"
match = { proto = ["udp"], dport = ["53"] }
key   = "src"
pps   = 10
`

func TestFastpathFragmentsOtherRuleIPv4(t *testing.T) { evFragmentsOtherRule(t, "ipv4") }
func TestFastpathFragmentsOtherRuleIPv6(t *testing.T) { evFragmentsOtherRule(t, "ipv6") }

// evFragmentsOtherRule: 3 000-byte UDP datagrams (two fragments each) to a
// port no rule limits, 100/s for 4 s, beside a ping rule and a udp/53 rule
// limiting 10/s per source: at least 95 % arrive (the later fragments take
// no rule meant for other traffic). On 427b78a: 5 of 400 (IPv6).
func evFragmentsOtherRule(t *testing.T, family string) {
	parallel(t)
	needShaper(t)
	s, got, log := evSendOneFlow(t, evFragOtherPolicy, family, 3000, 100)
	_, _, line := finalStats(t, log)
	t.Logf("%s: %d of %d datagrams delivered; rule ping: packets=%d dropped=%d; rule dns: packets=%d dropped=%d", family, got, s.Sent,
		statField(t, line, "rule.ping.packets"), statField(t, line, "rule.ping.dropped"), statField(t, line, "rule.dns.packets"), statField(t, line, "rule.dns.dropped"))
	if s.Sent < 380 {
		t.Errorf("the sender sent %d datagrams, want about 400", s.Sent)
	}
	if float64(got) < 0.95*float64(s.Sent) {
		t.Errorf("%s: %d of %d fragmented datagrams to an unlimited port delivered, want at least 95 %%: a rule for other traffic limited their fragments", family, got, s.Sent)
	}
}

// evSendOneFlow makes a topology, starts packetshaper in it by
// evStartFastpath with policy (it must run), sends one flow (source port
// 10000) of size-byte UDP datagrams to B's port 9000 in family at pps for
// 4 s (psend send's extra flags added), stops packetshaper, and returns
// what was sent, how many of the flow's datagrams arrived and
// packetshaper's log.
func evSendOneFlow(t *testing.T, policy, family string, size, pps int, extra ...string) (s sendResult, got uint64, log string) {
	t.Helper()
	tp := newTopo(t)
	sh, _ := tp.evStartFastpath(policy, tp.VethB)
	evMustRun(t, sh)
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s = tp.send(append([]string{"--dst", tp.dst9000(family), "--flows", "1", "--sport", "10000", "--size", fmt.Sprint(size), "--pps", fmt.Sprint(pps), "--duration", "4s"}, extra...)...)
	r := recvDone(rc, 35*time.Second)
	log = tp.stopShaper(sh)
	return s, r.Received["9000"]["10000"], log
}

// evFragFlowPolicy: 1mbit per 5-tuple for UDP to 9000, the burst the
// default for that rate (65 535 bytes) written out.
const evFragFlowPolicy = `
[[rule]]
name    = "bytes"
match   = { proto = ["udp"], dport = ["9000"] }
bitrate = "1mbit"
burst   = 65535
`

func TestFastpathFragmentsOneFlowIPv4(t *testing.T) { evFragmentsOneFlow(t, "ipv4") }
func TestFastpathFragmentsOneFlowIPv6(t *testing.T) { evFragmentsOneFlow(t, "ipv6") }

// evFragmentsOneFlow: one 5-tuple of 2 900-byte datagrams (two fragments
// each) at 80/s for 4 s through 1mbit: the bytes delivered are at most
// 1.05× what an ideal byte bucket charging each datagram its whole IP
// length lets through (as the queue charges it), and at least 0.90×. On
// 427b78a: 1.67× (IPv4), 1.70× (IPv6), all 320 of 320 (the later fragments
// in the address pair's bucket).
func evFragmentsOneFlow(t *testing.T, family string) {
	parallel(t)
	needShaper(t)
	ipLen := udpHdrLen(family) + 2900
	s, got, _ := evSendOneFlow(t, evFragFlowPolicy, family, 2900, 80, "--times")
	want := evBucket(evPackets(s, "10000", func(int) float64 { return float64(ipLen) }), 125000, 65535) / float64(ipLen)
	t.Logf("%s: %d of %d datagrams of %d bytes delivered", family, got, s.Sent, ipLen)
	evCheckBar(t, fmt.Sprintf("%s fragmented datagrams of one flow through 1mbit", family), float64(got), want, 0.90, 1.05)
}

// TestFastpathFragmentsMixIPv6: one IPv6 5-tuple mixing plain datagrams
// (1 000 bytes) and fragmented ones (2 900), 100/s each, with datagrams
// behind 33 Destination Options headers (1 100 bytes, 100/s: past the
// program's unrolled walk of 32, walked on by bpf_loop), for 4 s, through 1mbit:
// the bytes delivered are at most 1.05× an ideal byte bucket over every
// packet of the flow, each costing its whole IP length, and at least
// 0.90×. On 427b78a: 2.39–2.41× (the issue: 2.51×; three buckets: the flow's, the address pair's
// for later fragments, user space's for the long chains).
func TestFastpathFragmentsMixIPv6(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	const nExt, extSize = 33, 1100
	sizes := []int{1000, 2900}
	ipLen := map[string]float64{"1000": 40 + 8 + 1000, "2900": 40 + 8 + 2900, fmt.Sprint(extSize): 40 + 8*nExt + 8 + extSize}
	sh, _ := tp.evStartFastpath(evFragFlowPolicy, tp.VethB)
	evMustRun(t, sh)
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	dst := tp.dst9000("ipv6")
	plain := tp.startSend("--dst", dst, "--flows", "1", "--sport", "10000", "--sizes", "1000,2900", "--pps", "200", "--duration", "4s", "--times")
	ext := tp.start(tp.A, "psend send6x", psendBin, "send6x", "--dst", dst, "--flows", "1", "--sport", "10000",
		"--dstopts", fmt.Sprint(nExt), "--size", fmt.Sprint(extSize), "--pps", "100", "--duration", "4s", "--times")
	sp, se := sendDone(plain), sendDone(ext)
	recvDone(rc, 35*time.Second)
	tp.stopShaper(sh)
	pkts := evPackets(sp, "10000", func(k int) float64 { return 40 + 8 + float64(sizes[k%len(sizes)]) })
	pkts = append(pkts, evPackets(se, "10000", func(int) float64 { return ipLen[fmt.Sprint(extSize)] })...)
	want := evBucket(pkts, 125000, 65535)
	var got float64
	for size, n := range evRecvSizes(t, rc) {
		l, ok := ipLen[size]
		if !ok {
			t.Fatalf("a datagram of %s bytes arrived: none was sent", size)
		}
		got += float64(n) * l
	}
	t.Logf("sent %d plain and fragmented, %d behind %d headers; delivered by size %v", sp.Sent, se.Sent, nExt, evRecvSizes(t, rc))
	evCheckBar(t, "bytes of one IPv6 flow mixing plain, fragmented and long-chain datagrams through 1mbit", got, want, 0.90, 1.05)
}

// TestFastpathChurnFlood: a source limited to 1 packet/s with a burst of 10
// (key src, max-flows 10 000) sends bursts of 10 every second for 10 s,
// beside an hping3 random-source flood (a new source per packet) through
// the same kernel rule: it gets within 10 % of the one bucket an ideal
// limiter keeps for it (about 19), the flood's sources never buy it a
// fresh one. On 427b78a: 37 and 80 (the LRU map evicts the source while it
// pauses, and it comes back with a full bucket).
func TestFastpathChurnFlood(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	sh, _ := tp.evStartFastpath(`
[[rule]]
name      = "src"
match     = { proto = ["udp"] }
key       = "src"
pps       = 1
burst     = 10
max-flows = 10000
`, tp.VethB, "--stats-interval", "500ms")
	evMustRun(t, sh)
	rc := tp.startRecv(":9000", "--duration", "40s", "--idle", "5s")
	fl := tp.startFlood(floodSpec{Port: 9001, Duration: 30 * time.Second, Size: 18})
	time.Sleep(time.Second) // the map is full of flood sources
	var pkts []evPkt
	t0 := time.Now()
	for i := range 10 {
		if d := time.Until(t0.Add(time.Duration(i) * time.Second)); d > 0 {
			time.Sleep(d)
		}
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", fmt.Sprint(10000+i), "--pps", "1000", "--count", "10", "--duration", "1s", "--times")
		pkts = append(pkts, evPackets(s, fmt.Sprint(10000+i), func(int) float64 { return 1 })...)
	}
	fl.stop()
	fr := floodDone(fl)
	r := recvDone(rc, 45*time.Second)
	log := tp.stopShaper(sh)
	t.Logf("flood: %d packets at %.0f/s; evictions %d; rule src: packets=%d", fr.Sent, fr.PPS(), logIntOr(log, "evictions"), logIntOr(log, "rule.src.packets"))
	if fr.Sent < 100000 {
		t.Errorf("the flood sent %d packets, fewer than 10 times the map (100 000): it did not churn it", fr.Sent)
	}
	if len(pkts) != 100 {
		t.Errorf("the source sent %d packets, want 100", len(pkts))
	}
	evCheckBar(t, "a source sending bursts of 10 every second beside the flood, 1/s burst 10", float64(r.Total), evBucket(pkts, 1, 10), 0.90, 1.10)
}

// TestFastpathMovingReload: a kernel rule (1 packet/s, burst 10) keeps its
// flow's bucket across three reloads that move it (a rule inserted above
// it, removed, inserted again; SIGHUP each time), with 100 packets sent in
// 0.2 s between reloads: the flow gets at most 4 more than the one bucket
// an ideal limiter keeps over the send times (about 16). On 427b78a: 28,
// while the log says kept_flows=[lim] (the flow key holds the rule's
// position).
func TestFastpathMovingReload(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	lim := udpRule("lim", "9000", 1, 10)
	above := `
[[rule]]
name  = "above"
match = { proto = ["udp"], dport = ["9100"] }
pps   = 100
` + lim
	sh, pol := tp.evStartFastpath(lim, tp.VethB)
	evMustRun(t, sh)
	rc := tp.startRecv(":9000", "--duration", "60s")
	var pkts []evPkt
	phase := func() {
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "200ms", "--times")
		pkts = append(pkts, evPackets(s, "10000", func(int) float64 { return 1 })...)
	}
	phase()
	for i, file := range []string{above, lim, above} {
		time.Sleep(time.Second)
		writePolicy(t, pol, file)
		sh.signal(syscall.SIGHUP)
		if !testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(sh.err.String(), "fast path reloaded") == i+1 || sh.exited() }) ||
			strings.Count(sh.err.String(), "fast path reloaded") != i+1 {
			t.Fatalf("reload %d: no \"fast path reloaded\" within 30 s:\n%s", i+1, indent(sh.err.String()))
		}
		phase()
	}
	time.Sleep(500 * time.Millisecond) // the last packets read
	r := stopRecv(rc)
	log := tp.stopShaper(sh)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "fast path reloaded") {
			t.Logf("%s", strings.TrimSpace(l))
		}
	}
	got := float64(r.Received["9000"]["10000"])
	want := evBucket(pkts, 1, 10)
	if got > want+4 || got < want-2 {
		t.Errorf("across three reloads moving the rule: %.0f delivered, one kept bucket gives %.1f: want at most %.0f (and at least %.0f)", got, want, want+4, want-2)
	} else {
		t.Logf("across three reloads moving the rule: %.0f delivered, one kept bucket gives %.1f: ok", got, want)
	}
}
