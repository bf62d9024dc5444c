package e2e

import (
	"github.com/packetshaper/packetshaper/internal/inetsum"

	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The offload limits, never blackholes, never outlives packetshaper (issue
// 16): an offloaded 5-tuple is held in the kernel to its rule's limit, not
// dropped outright; spoofed copies of a flow's tuple cost it no more with
// --offload than without; and what packetshaper put in the kernel goes at
// its restart, its clean stop, and within --offload-timeout (at most 10 s)
// of its death.

// offloadRules are the rules.sh arguments of these tests: UDP to B, IPv4.
var offloadRules = []string{"--queue", "0", "--proto", "udp", "--family", "ipv4"}

// newOffloadTopo is the opening of the tests of one offloaded 5-tuple
// from source port sport: newTopo(t), a count of its packets after the
// queue (countAfterQueue) and rules.sh's divert rule with --offload.
func newOffloadTopo(t *testing.T, sport int) *topo {
	t.Helper()
	tp := newTopo(t)
	tp.countAfterQueue(sport)
	tp.rules(append([]string{"add", "--offload"}, offloadRules...)...)
	return tp
}

// offloadArgs are packetshaper's flags in those tests: 100 packets/s
// (burst 5) on queue 0, a stats line a second, a flow offloaded after 100
// drops for 10 s (the most; the last flag's value).
func offloadArgs() []string {
	return []string{"--queue", "0", "--pps", "100", "--burst", "5", "--stats-interval", "1s",
		"--offload", "--offload-after", "100", "--offload-timeout", "10s"}
}

// countAfterQueue adds, in B, an nft chain after the queue (priority 10)
// counting the UDP packets to port 9000 from sport: what the kernel and the
// shaper let through.
func (tp *topo) countAfterQueue(sport int) {
	tp.t.Helper()
	for _, args := range [][]string{
		{"nft", "add", "table", "inet", "pscount"},
		{"nft", "add", "chain", "inet", "pscount", "in", "{ type filter hook input priority 10; }"},
		{"nft", "add", "rule", "inet", "pscount", "in", "udp", "dport", "9000", "udp", "sport", strconv.Itoa(sport), "counter"},
	} {
		tp.must(tp.B, args...)
	}
}

// offloadElements lists the elements of set ports4 in B ("" if none).
func (tp *topo) offloadElements() string {
	tp.t.Helper()
	out := tp.must(tp.B, "nft", "list", "set", "inet", "packetshaper_offload", "ports4")
	i := strings.Index(out, "elements = {")
	if i < 0 {
		return ""
	}
	return out[i:]
}

// waitOffloaded waits up to 10 s for an element of sport's tuple in ports4.
func (tp *topo) waitOffloaded(sport int) string {
	tp.t.Helper()
	want := fmt.Sprintf("%s . %s . udp . %d . 9000", tp.IPA, tp.IPB, sport)
	deadline := time.Now().Add(10 * time.Second)
	for {
		el := tp.offloadElements()
		if strings.Contains(el, want) {
			return el
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("no element %q in ports4 after 10 s:\n%s", want, el)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitQueueEmpty waits up to 10 s until no packet waits in queue 0.
func (tp *topo) waitQueueEmpty() {
	tp.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tp.queue(0).Waiting != 0 {
		if time.Now().After(deadline) {
			tp.t.Fatalf("queue 0 still holds %d packets after 10 s", tp.queue(0).Waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOffloadBurstThenUnder: a flow bursts once, far over its limit of
// 100/s (burst 5), and gets offloaded; then the same 5-tuple sends at
// 50/s, under its limit, while its element is still in the kernel (timeout
// 10 s). It must get what its limit allows (all of it, ±5 %): the element
// limits, it does not blackhole.
func TestOffloadBurstThenUnder(t *testing.T) {
	needShaper(t)
	const sport = 20000
	tp := newOffloadTopo(t, sport)
	sh := tp.startShaper(offloadArgs()...)
	rc := tp.startRecv(":9000", "--duration", "40s", "--idle", "5s")

	burst := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", strconv.Itoa(sport), "--pps", "0",
		"--count", "3000", "--duration", "2s")
	el := tp.waitOffloaded(sport)
	tp.waitQueueEmpty()
	before := tp.nftCounter(tp.B, "pscount", "in")
	t.Logf("burst: %d sent, %d through; offloaded: %s", burst.Sent, before, strings.TrimSpace(el))

	under := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", strconv.Itoa(sport), "--pps", "50",
		"--duration", "4s", "--times")
	tp.waitQueueEmpty()
	got := float64(tp.nftCounter(tp.B, "pscount", "in") - before)
	f := under.Flows[strconv.Itoa(sport)]
	want := idealBucket(f.TimesUs, 100, 5)
	t.Logf("under its limit after the burst: %d sent, %.0f through, an exact bucket gives %.0f", under.Sent, got, want)
	checkWithin(t, "the offloaded flow under its limit", got, want, 0.05)
	if el := tp.offloadElements(); !strings.Contains(el, fmt.Sprintf(". %d . 9000", sport)) {
		t.Logf("(the element went meanwhile: %q)", el)
	}
	stopRecv(rc)
	log := tp.stopShaper(sh)
	if n := logInt(t, log, "offloaded"); n == 0 {
		t.Errorf("offloaded = 0: the burst was not offloaded, the test proves nothing")
	}
}

// spoofUDP sends n UDP datagrams from src to dst with a raw socket in ns,
// their payload 8 bytes of 0xff (psend recv --times reports seq -1 for
// them), as fast as the socket takes them; it returns how many it sent.
func spoofUDP(t *testing.T, ns string, src, dst netip.AddrPort, n int) int {
	t.Helper()
	type res struct {
		sent int
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		// The thread enters ns and comes back before it is unlocked.
		// It must not exit instead: the harness starts its processes
		// with Pdeathsig, which the kernel sends when the thread that
		// forked them exits, and this one may have.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- res{err: err}
			return
		}
		defer func() {
			if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			} // else the thread stays locked and dies with the goroutine
			home.Close()
		}()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer unix.Close(fd)
		const plen = 8
		p := make([]byte, 20+8+plen)
		p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		copy(p[12:16], s4[:])
		copy(p[16:20], d4[:])
		binary.BigEndian.PutUint16(p[10:], ^inetsum.Add(p[:20], 0))
		binary.BigEndian.PutUint16(p[20:], src.Port())
		binary.BigEndian.PutUint16(p[22:], dst.Port())
		binary.BigEndian.PutUint16(p[24:], 8+plen) // checksum 0: none (IPv4)
		for i := 28; i < len(p); i++ {
			p[i] = 0xff
		}
		to := &unix.SockaddrInet4{Addr: d4}
		sent := 0
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, p, 0, to); err != nil {
				if err == unix.ENOBUFS || err == unix.EAGAIN {
					continue
				}
				ch <- res{sent, err}
				return
			}
			sent++
		}
		ch <- res{sent: sent}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("spoofing from %s: %v", ns, r.err)
	}
	return r.sent
}

// TestOffloadSpoofedTuple: a victim flow sends at 50/s, under its limit of
// 100/s (burst 5); from the victim's own address and port, an attacker
// sends 1100 datagrams every 2 s (3 times). With --offload the victim must
// lose no more than without (±5 % of what it sent): the kernel holds the
// tuple to the limit, as the shaper did, and does not drop it outright.
func TestOffloadSpoofedTuple(t *testing.T) {
	got := map[bool]int{}
	var sent int
	var mu sync.Mutex // guards got and sent
	// The two runs side by side (each in its own namespaces; a victim at
	// 50/s and 3 bursts of 1100 spoofed datagrams are no flood): the same
	// load on both, and half the time. The group returns when both did.
	t.Run("group", func(t *testing.T) {
		for _, withOffload := range []bool{false, true} {
			t.Run(fmt.Sprintf("offload=%v", withOffload), func(t *testing.T) {
				t.Parallel()
				spoofedTupleRun(t, withOffload, &mu, got, &sent)
			})
		}
	})
	if len(got) != 2 || t.Failed() {
		return
	}
	t.Logf("victim's packets through: %d without offload, %d with (of %d)", got[false], got[true], sent)
	if margin := 0.05 * float64(sent); float64(got[true]) < float64(got[false])-margin {
		t.Errorf("with --offload the spoofed packets cost the victim %d packets, without %d (margin %.0f)",
			sent-got[true], sent-got[false], margin)
	}
}

// spoofedTupleRun is one run of TestOffloadSpoofedTuple, with or without
// --offload; it records the victim's packets through in got (and sent).
func spoofedTupleRun(t *testing.T, withOffload bool, mu *sync.Mutex, got map[bool]int, sent *int) {
	needShaper(t)
	tp := newTopo(t)
	const sport = 10000
	add := append([]string{"add"}, offloadRules...)
	args := []string{"--queue", "0", "--pps", "100", "--burst", "5", "--stats-interval", "1s"}
	if withOffload {
		add = append(add, "--offload")
		args = append(args, "--offload", "--offload-after", "100", "--offload-timeout", "2s")
	}
	tp.rules(add...)
	sh := tp.startShaper(args...)
	rc := tp.startRecv(":9000", "--duration", "40s", "--idle", "3s", "--times")
	victim := tp.startSend("--dst", tp.IPB+":9000", "--flows", "1", "--sport", strconv.Itoa(sport), "--pps", "50",
		"--duration", "6s", "--seq")
	src := netip.AddrPortFrom(netip.MustParseAddr(tp.IPA), sport)
	dst := netip.AddrPortFrom(netip.MustParseAddr(tp.IPB), 9000)
	spoofed := 0
	for i := 0; i < 3; i++ {
		time.Sleep(500 * time.Millisecond)
		spoofed += spoofUDP(t, tp.A, src, dst, 1100)
		time.Sleep(1500 * time.Millisecond)
	}
	vs := sendDone(victim)
	r := recvDone(rc, 45*time.Second)
	log := tp.stopShaper(sh)
	n := 0
	for _, s := range r.Seqs["9000"][strconv.Itoa(sport)] {
		if s >= 0 {
			n++
		}
	}
	mu.Lock()
	got[withOffload], *sent = n, int(vs.Sent)
	mu.Unlock()
	t.Logf("victim: %d of %d through, beside %d spoofed datagrams with its tuple (offloaded=%d)",
		n, vs.Sent, spoofed, logIntOr(log, "offloaded"))
	if withOffload && logIntOr(log, "offloaded") == 0 {
		t.Errorf("offloaded = 0: the spoofed flood was not offloaded, the test proves nothing")
	}
}

// logIntOr is logInt's last value of name=N in log, or 0 if none.
func logIntOr(log, name string) uint64 {
	m := regexp.MustCompile(`(?:^|\s)`+regexp.QuoteMeta(name)+`=(\d+)`).FindAllStringSubmatch(log, -1)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseUint(m[len(m)-1][1], 10, 64)
	return n
}

// TestOffloadNeverOutlives: an --offload-timeout over 10 s is refused; an
// offloaded tuple whose packetshaper was killed (SIGKILL) floods through
// unlimited again within the timeout (10 s, the most); a restarted
// packetshaper flushes what a killed one left at once; and a clean stop
// leaves no element.
func TestOffloadNeverOutlives(t *testing.T) {
	needShaper(t)
	const sport = 20000
	tp := newOffloadTopo(t, sport)
	args := offloadArgs()

	out, err := tp.run(tp.B, append([]string{shaperBin}, append(args[:len(args)-1:len(args)-1], "11s")...)...)
	if err == nil || !strings.Contains(out, "--offload-timeout must be between 100ms and 10s, not 11s") {
		t.Errorf("--offload-timeout 11s: %v, %q; want a refusal", err, out)
	}

	// Killed: the element outlives packetshaper by at most its timeout.
	sh := tp.startShaper(args...)
	rc := tp.startRecv(":9000", "--duration", "60s", "--idle", "5s")
	flood := func() {
		tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", strconv.Itoa(sport), "--pps", "0",
			"--count", "3000", "--duration", "2s")
	}
	flood()
	tp.waitOffloaded(sport)
	sh.signal(syscall.SIGKILL)
	if err := sh.wait(5 * time.Second); err == nil {
		t.Fatalf("packetshaper exited cleanly after SIGKILL?")
	}
	killed := time.Now()
	// The flood goes on with no packetshaper, at 2000/s in windows of
	// 0.5 s: the queue rule lets it through (bypass), the element 100/s
	// of it until it expires, then all of it. The element was refreshed
	// at the latest at the kill: a window that starts 10 s after it must
	// get all through.
	for {
		before, start := tp.nftCounter(tp.B, "pscount", "in"), time.Since(killed)
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", strconv.Itoa(sport), "--pps", "2000", "--duration", "500ms")
		through := tp.nftCounter(tp.B, "pscount", "in") - before
		t.Logf("%5.1fs after the kill: %d of %d through", start.Seconds(), through, s.Sent)
		if through >= s.Sent*9/10 {
			t.Logf("the killed packetshaper's element limited the flood for less than %.1fs (timeout 10 s)", start.Seconds())
			break
		}
		if start > 10*time.Second+200*time.Millisecond {
			t.Errorf("%.1fs after the kill, the element still limits the flood (%d of %d through): it outlived packetshaper by more than its timeout, 10 s",
				start.Seconds(), through, s.Sent)
			break
		}
	}

	// Restarted: what the killed one left goes at once.
	sh = tp.startShaper(args...)
	flood()
	tp.waitOffloaded(sport)
	sh.signal(syscall.SIGKILL)
	sh.wait(5 * time.Second)
	if el := tp.offloadElements(); el == "" {
		t.Fatalf("the element went with the kill: the restart tests nothing")
	}
	sh = tp.startShaper(args...)
	if el := tp.offloadElements(); el != "" {
		t.Errorf("a restarted packetshaper left the killed one's elements:\n%s", el)
	}

	// Stopped cleanly: no element left.
	flood()
	tp.waitOffloaded(sport)
	tp.stopShaper(sh)
	if el := tp.offloadElements(); el != "" {
		t.Errorf("elements left after a clean stop:\n%s", el)
	}
	stopRecv(rc)
}
