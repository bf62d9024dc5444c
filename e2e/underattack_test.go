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

// The shaper under the attacks of issue 12, each against the real binary in
// namespaces: a random-source flood churning the flow table, IPv6 extension
// header tricks, a stalled shaper whose fail-open passes must be counted,
// and a flood above the queue's ceiling with and without --offload.

// logInt reads NAME=N (a top-level field: preceded by a space) from the
// last line of log that has it.
func logInt(t *testing.T, log, name string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?:^|\s)`+regexp.QuoteMeta(name)+`=(\d+)`).FindAllStringSubmatch(log, -1)
	if m == nil {
		t.Fatalf("no %s= in packetshaper's log:\n%s", name, indent(log))
	}
	n, _ := strconv.ParseUint(m[len(m)-1][1], 10, 64)
	return n
}

// idealBucket is what an ideal token bucket (full at the first packet)
// lets through of packets sent at timesUs (µs after the first).
func idealBucket(timesUs []int64, rate, burst float64) float64 {
	b := bucket{rate: rate, burst: burst}
	var n float64
	for _, us := range timesUs {
		if b.allow(us * 1000) {
			n++
		}
	}
	return n
}

// TestChurnFlood: 4 flows at 500 packets/s limited to 100/s per 5-tuple
// in a table of 10 000 flows, while hping3 floods the same queue and rule
// from random sources (a new flow per packet, far more than the table
// holds). The flows that keep sending are never evicted for the one-packet
// flows: each gets what an exact limiter gives it, ±5 %, with the small
// burst and with the large one (where a fresh burst per eviction showed
// most), while the table evicts hundreds of thousands of flows.
func TestChurnFlood(t *testing.T) {
	// churnEvictions is how many flows the flood must evict.
	const churnEvictions = 100000
	for _, burst := range []float64{5, 50} {
		t.Run(fmt.Sprintf("burst%.0f", burst), func(t *testing.T) {
			needShaper(t)
			tp := newTopo(t)
			tp.rules("add", "--queue", "0", "--proto", "udp", "--family", "ipv4")
			// A long queue: the test is about the flow table, and a
			// loaded machine's scheduling hiccups must not overflow the
			// queue (checked below: failopen_passed must stay near 0).
			sh := tp.startShaper("--queue", "0", "--pps", "100", "--burst", fmt.Sprint(burst), "--max-flows", "10000", "--queue-maxlen", "65536",
				"--stats-interval", "500ms")
			rc := tp.startRecv(":9000", "--duration", "60s", "--idle", "3s")
			// The flood goes to a port nobody listens on (the receiver must
			// not drown), through the same queue, rule and flow table. It
			// lasts as long as it takes to churn the table (the evictions
			// wanted below, read from the stats lines), at least the
			// flows' 4 s, at most 50 s: a loaded machine floods slower.
			fl := tp.startFlood(floodSpec{Port: 9001, Duration: 50 * time.Second, Size: 18})
			time.Sleep(500 * time.Millisecond) // the table is full of flood flows
			s := tp.send("--dst", tp.IPB+":9000", "--flows", "4", "--sport", "10000", "--pps", "500", "--duration", "4s", "--times")
			testutil.WaitFor(t, 45*time.Second, func() bool { return logIntOr(sh.err.String(), "evictions") >= churnEvictions || fl.p.exited() })
			fl.stop()
			fr := floodDone(fl)
			r := recvDone(rc, 45*time.Second)
			log := tp.stopShaper(sh)
			t.Logf("flood: %d packets at %.0f/s; evictions %d, failopen_passed %d", fr.Sent, fr.PPS(), logInt(t, log, "evictions"), logInt(t, log, "failopen_passed"))
			if ev := logInt(t, log, "evictions"); ev < churnEvictions {
				t.Errorf("evictions = %d: the flood did not churn the table (want > %d)", ev, churnEvictions)
			}
			// A packet the kernel passes by fail-open (the queue or the
			// socket's buffer full for an instant) bypasses the table: a
			// flood packet's churns one flow fewer (the evictions above
			// count what churned), a test flow's arrives uncharged (at
			// most maxFailopen more than its share, under the 5 % below).
			// More means the queue overflowed and the test shows nothing.
			const maxFailopen = 10
			if fo := logInt(t, log, "failopen_passed"); fo > maxFailopen {
				t.Errorf("failopen_passed = %d (at most %d): the queue overflowed, the test shows nothing about the table", fo, maxFailopen)
			}
			for _, port := range sortedPorts(s.Flows) {
				f := s.Flows[port]
				want := idealBucket(f.TimesUs, 100, burst)
				checkWithin(t, fmt.Sprintf("flow %s under the flood (burst %.0f)", port, burst), float64(r.Received["9000"][port]), want, 0.05)
			}
		})
	}
}

// TestIPv6ExtensionHeaders: UDP to a limited port behind 16 Destination
// Options headers (walked to the UDP header: limited per 5-tuple) or behind
// one 600-byte header, past the 256-byte copy range (keyed without ports:
// all four flows share their address pair's flow), is limited like any
// other traffic. Before, both were "malformed" and accepted unlimited.
func TestIPv6ExtensionHeaders(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--family", "ipv6")
	for _, tc := range []struct {
		name    string
		args    []string
		noPorts bool
	}{
		{"16 headers", []string{"--dstopts", "16"}, false},
		{"one header past the copy range", []string{"--dstopt-len", "600"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := tp.startShaper("--queue", "0", "--pps", "100", "--burst", "5", "--copy-range", "256")
			rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "2s")
			p := tp.start(tp.A, "psend send6x", append([]string{psendBin, "send6x", "--dst", "[" + tp.IP6B + "]:9000",
				"--flows", "4", "--sport", "10000", "--pps", "500", "--duration", "3s", "--times"}, tc.args...)...)
			s := sendDone(p)
			r := recvDone(rc, 35*time.Second)
			log := tp.stopShaper(sh)
			if m := logInt(t, log, "malformed"); m != 0 {
				t.Errorf("malformed = %d, want 0", m)
			}
			np := logInt(t, log, "no_ports")
			if tc.noPorts {
				if np != s.Sent {
					t.Errorf("no_ports = %d, want every packet (%d)", np, s.Sent)
				}
				// One flow for the address pair: an ideal bucket over all
				// the packets together.
				var all []int64
				first := int64(-1)
				for _, ns := range sendTimes(s, sortedPorts(s.Flows)...) {
					if first < 0 {
						first = ns
					}
					all = append(all, (ns-first)/1000)
				}
				checkWithin(t, "all four flows, keyed without ports", float64(r.Total), idealBucket(all, 100, 5), 0.10)
				return
			}
			if np != 0 {
				t.Errorf("no_ports = %d, want 0 (the chain fits in the copy range)", np)
			}
			for _, port := range sortedPorts(s.Flows) {
				f := s.Flows[port]
				checkWithin(t, "flow "+port, float64(r.Received["9000"][port]), idealBucket(f.TimesUs, 100, 5), 0.10)
			}
		})
	}
}

// metricsIn fetches http://addr/metrics from inside ns with bash's
// /dev/tcp (no HTTP client needed in the namespace).
func (tp *topo) metricsIn(ns, port string) string {
	tp.t.Helper()
	return tp.must(ns, "bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/`+port+`; printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3; timeout 5 cat <&3`)
}

// TestFailOpenCounted: a shaper stopped (SIGSTOP) for 2 s with a queue of
// 100 lets the kernel accept the rest of the traffic without a verdict;
// after SIGCONT, stats and metrics count exactly those packets
// (failopen_passed, from the queueing rule's counter), the time the queue
// was full (failopen_secs), and the log warned when it began and ended.
func TestFailOpenCounted(t *testing.T) {
	needShaper(t)
	tp, sh := newShaper9000(t, "ipv4", "--pps", "1000000", "--burst", "1000000", "--queue-maxlen", "100",
		"--metrics-addr", "127.0.0.1:9464", "--stats-interval", "500ms")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	sp := tp.startSend("--dst", tp.IPB+":9000", "--flows", "2", "--pps", "1000", "--duration", "4s")
	time.Sleep(time.Second)
	sh.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = sh.cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(2 * time.Second)
	sh.signal(syscall.SIGCONT)
	s := sendDone(sp)
	r := recvDone(rc, 35*time.Second)
	time.Sleep(1500 * time.Millisecond) // a rule counter reading after the traffic
	metrics := tp.metricsIn(tp.B, "9464")
	log := tp.stopShaper(sh)
	acc := logInt(t, log, "accepted")
	passed := logInt(t, log, "failopen_passed")
	if r.Total != s.Sent {
		t.Errorf("sent %d, received %d: want all (high limit; fail-open for the rest)", s.Sent, r.Total)
	}
	// Every packet that arrived was accepted by packetshaper or passed by
	// the kernel without a verdict.
	if want := r.Total - acc; passed != want {
		t.Errorf("failopen_passed = %d, want received %d - accepted %d = %d", passed, r.Total, acc, want)
	}
	if passed < 1000 {
		t.Errorf("failopen_passed = %d: the 2 s stop should have passed about 3 800", passed)
	}
	if !strings.Contains(log, "failopen_exact=true") {
		t.Errorf("the count is not exact (the iptables rule's counter is readable here):\n%s", indent(log))
	}
	m := regexp.MustCompile(`failopen_secs=([0-9.]+)`).FindAllStringSubmatch(log, -1)
	if secs, _ := strconv.ParseFloat(m[len(m)-1][1], 64); secs < 1.5 || secs > 2.6 {
		t.Errorf("failopen_secs = %.3f, want about 2 (the stop)", secs)
	}
	// The start is seen when the shaper resumes (its monitor was stopped
	// too), the end once the queue has drained.
	if !strings.Contains(log, "filled while packetshaper was stalled") || !strings.Contains(log, "fail-open ended") {
		t.Errorf("want warnings when fail-open starts and ends:\n%s", indent(log))
	}
	if want := fmt.Sprintf("packetshaper_failopen_passed_total{queue=\"0\"} %d", passed); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q:\n%s", want, metrics)
	}
	t.Logf("sent %d, accepted %d by packetshaper, %d passed by fail-open", s.Sent, acc, passed)
}

// throttle puts pid in a new cpu cgroup limited to quota of every period
// (cgroup v1's cpu controller or cgroup v2), removed at cleanup: a shaper
// on a slow machine, whose queue a flood can outrun.
func throttle(t *testing.T, pid int, quota, period time.Duration) {
	t.Helper()
	name := fmt.Sprintf("pse-throttle-%d", pid)
	var dir, procs string
	var files map[string]string
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		dir = filepath.Join("/sys/fs/cgroup/cpu", name)
		files = map[string]string{"cpu.cfs_period_us": fmt.Sprint(period.Microseconds()), "cpu.cfs_quota_us": fmt.Sprint(quota.Microseconds())}
		procs = "cgroup.procs"
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		dir = filepath.Join("/sys/fs/cgroup", name)
		files = map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota.Microseconds(), period.Microseconds())}
		procs = "cgroup.procs"
	default:
		t.Fatal("no cpu cgroup controller (cgroup v1 cpu or cgroup v2) to slow the shaper down")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Move the process (if alive) back to the root, then remove.
		_ = os.WriteFile(filepath.Join(filepath.Dir(dir), procs), []byte(fmt.Sprint(pid)), 0)
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cleanup: could not remove cgroup %s", dir)
	})
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0); err != nil {
			t.Fatalf("cgroup %s: %v", f, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, procs), []byte(fmt.Sprint(pid)), 0); err != nil {
		t.Fatalf("cgroup procs: %v", err)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// nftCounter reads the packets of the counter in ns's chain.
func (tp *topo) nftCounter(ns, table, chain string) uint64 {
	tp.t.Helper()
	out := tp.must(ns, "nft", "list", "chain", "inet", table, chain)
	m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(out)
	if m == nil {
		tp.t.Fatalf("no counter in:\n%s", out)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// TestOffloadFlood: a single UDP flow offered as fast as the sender goes,
// above what a shaper slowed to a fifth of a core can take, plus 4 flows
// at 500 packets/s, all limited to 100/s per 5-tuple. Without --offload the
// flood fills the queue and fail-open lets packets through unlimited, the
// legitimate flows' among them. With --offload the flood's 5-tuple is held
// to its limit in the kernel after 100 drops in a row: the legitimate flows
// get their limit ±5 %, the flood at most its own; and after the exit and
// rules.sh del no set element or rule is left.
func TestOffloadFlood(t *testing.T) {
	for _, withOffload := range []bool{false, true} {
		t.Run(fmt.Sprintf("offload=%v", withOffload), func(t *testing.T) {
			needShaper(t)
			tp := newTopo(t)
			// What arrives of the flood, counted after the queue.
			for _, args := range [][]string{
				{"nft", "add", "table", "inet", "pscount"},
				{"nft", "add", "chain", "inet", "pscount", "in", "{ type filter hook input priority 10; }"},
				{"nft", "add", "rule", "inet", "pscount", "in", "udp", "dport", "9001", "counter"},
			} {
				tp.must(tp.B, args...)
			}
			add := []string{"add", "--queue", "0", "--proto", "udp", "--family", "ipv4"}
			// A long queue (the flood still overflows it without
			// --offload: it comes at five times what the shaper takes),
			// so that a loaded machine's hiccups do not overflow it
			// before the offload takes the flood away.
			args := []string{"--queue", "0", "--pps", "100", "--burst", "5", "--stats-interval", "1s", "--queue-maxlen", "65536"}
			if withOffload {
				add = append(add, "--offload")
				args = append(args, "--offload", "--offload-after", "100", "--offload-timeout", "1s")
			}
			tp.rules(add...)
			sh := tp.startShaper(args...)
			throttle(t, sh.cmd.Process.Pid, 2*time.Millisecond, 10*time.Millisecond)
			rc := tp.startRecv(":9000", "--duration", "40s", "--idle", "3s")
			// With --offload the flood lasts long enough to surround the
			// legitimate flows, which start once it is offloaded and
			// the queue has drained: a legitimate packet stuck behind
			// 65 536 flood packets in a throttled shaper's queue is
			// decided late, at the time it is read, and a bucket that
			// filled to its burst meanwhile cannot give it the tokens
			// of that wait (26 of 404 per flow, measured).
			floodFor := "5s"
			if withOffload {
				floodFor = "9s"
			}
			flood := tp.startSend("--dst", tp.IPB+":9001", "--flows", "1", "--sport", "20000", "--pps", "0",
				"--count", "6000000", "--duration", floodFor)
			time.Sleep(300 * time.Millisecond)
			if withOffload {
				testutil.Eventually(t, 10*time.Second, func() bool {
					return strings.Contains(tp.offloadElements(), ". 20000 . 9001") && tp.queue(0).Waiting < 100
				}, "the flood was not offloaded, or the queue did not drain, within 10 s")
			}
			s := tp.send("--dst", tp.IPB+":9000", "--flows", "4", "--sport", "10000", "--pps", "500", "--duration", "4s", "--times")
			fs := sendDone(flood)
			r := recvDone(rc, 45*time.Second)
			log := tp.stopShaper(sh)
			floodGot := tp.nftCounter(tp.B, "pscount", "in")
			floodLimit := 5 + 100*float64(fs.Seconds)
			t.Logf("flood: sent %d in %.1fs (%.0f/s), %d arrived (limit %.0f); failopen_passed %d",
				fs.Sent, fs.Seconds, float64(fs.Sent)/fs.Seconds, floodGot, floodLimit, logInt(t, log, "failopen_passed"))
			var over float64
			for _, port := range sortedPorts(s.Flows) {
				f := s.Flows[port]
				want := idealBucket(f.TimesUs, 100, 5)
				got := float64(r.Received["9000"][port])
				over = max(over, got/want-1)
				if withOffload {
					checkWithin(t, "legitimate flow "+port+" beside the offloaded flood", got, want, 0.05)
				} else {
					t.Logf("legitimate flow %s without offload: %.0f, an exact limiter gives %.0f (%+.0f %%)", port, got, want, 100*(got/want-1))
				}
			}
			if !withOffload {
				// The scenario must be one the shaper alone cannot hold:
				// otherwise the offload half proves nothing.
				if logInt(t, log, "failopen_passed") == 0 || float64(floodGot) < 2*floodLimit {
					t.Errorf("without --offload the flood did not overflow the queue (failopen_passed %d, flood got %d): the test is not testing offload",
						logInt(t, log, "failopen_passed"), floodGot)
				}
				return
			}
			if float64(floodGot) > floodLimit*1.05 {
				t.Errorf("the offloaded flood got %d packets through, more than its limit %.0f", floodGot, floodLimit)
			}
			if n := logInt(t, log, "offloaded"); n == 0 {
				t.Errorf("offloaded = 0")
			}
			// Nothing left behind: no element after the exit, no rule or
			// table after rules.sh del.
			out := tp.must(tp.B, "nft", "list", "table", "inet", "packetshaper_offload")
			if strings.Contains(out, "elements") {
				t.Errorf("set elements left after the exit:\n%s", out)
			}
			tp.rules("del", "--queue", "0", "--proto", "udp", "--family", "ipv4", "--offload")
			if out, err := tp.run(tp.B, "nft", "list", "table", "inet", "packetshaper_offload"); err == nil {
				t.Errorf("the offload table is still there after rules.sh del:\n%s", out)
			}
			if out := tp.must(tp.B, "iptables", "-S"); strings.Contains(out, "NFQUEUE") {
				t.Errorf("a queue rule is left after rules.sh del:\n%s", out)
			}
		})
	}
}

// vmHWM reads a process's peak RSS (VmHWM) in bytes.
func vmHWM(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return n << 10
}

// Live memory, as docs/design.md states it: a process's peak RSS is about
// liveRSSFixed plus tableBytesPerFlow per flow in its tables (×1.1).
// tableBytesPerFlow is the worst case, just after the index doubled (the
// 160-byte entry, 4 index slots per flow and the 2 the old index leaves
// behind, 8 bytes of ghost: 216; about 180 at the table's cap, see
// docs/design.md): how many flows the flood leaves in the table decides
// where between the two a run lands. liveMemFlows is how many flows
// TestLiveMemory fills the table with.
const (
	liveMemFlows      = 500000
	liveRSSFixed      = 24 << 20
	tableBytesPerFlow = 216
)

// TestLiveMemory fills a --max-flows 1000000 table with a random-source
// flood (a new flow per packet) until it holds liveMemFlows flows and
// checks the shaper's peak RSS against the figure of docs/design.md for
// the flows it held.
func TestLiveMemory(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0", "--pps", "100", "--max-flows", "1000000", "--stats-interval", "1s")
	// The flood lasts until the table holds liveMemFlows flows (read from
	// the stats lines), at most 50 s: a loaded machine floods slower.
	fl := tp.startFlood(floodSpec{Port: 9001, Duration: 50 * time.Second, Size: 18})
	testutil.WaitFor(t, 50*time.Second, func() bool { return logIntOr(sh.err.String(), "flows") >= liveMemFlows || fl.p.exited() })
	fl.stop()
	fr := floodDone(fl)
	time.Sleep(1200 * time.Millisecond) // a stats line after the flood
	hwm := vmHWM(t, sh.cmd.Process.Pid)
	log := tp.stopShaper(sh)
	flowsHeld := logInt(t, log, "flows")
	bound := uint64(liveRSSFixed + tableBytesPerFlow*float64(flowsHeld)*1.1)
	t.Logf("flood %d packets (%.0f/s); %d flows held, peak RSS %.1f MiB (%.0f bytes per flow over the fixed part), bound %.1f MiB",
		fr.Sent, fr.PPS(), flowsHeld, float64(hwm)/(1<<20), (float64(hwm)-liveRSSFixed)/float64(flowsHeld), float64(bound)/(1<<20))
	if flowsHeld < 300000 {
		// liveMemFlows was in a stats line, or the flood ended at its bound.
		t.Errorf("only %d flows held: the flood did not fill the table enough to measure", flowsHeld)
	}
	if hwm > bound {
		t.Errorf("peak RSS %.1f MiB with %d flows, the README's figures allow %.1f MiB", float64(hwm)/(1<<20), flowsHeld, float64(bound)/(1<<20))
	}
}
