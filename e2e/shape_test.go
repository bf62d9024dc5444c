package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// Shaping (issue 9): packets over the rate are held in the kernel's queue
// and accepted at their departure time, not dropped.

// gcra is what a shaping token bucket (rate per second, burst packets,
// maxDelay) does with packets sent at sendNs, from the generic cell rate
// algorithm's virtual scheduling, independent of packetshaper's arithmetic:
// each packet's departure (ns), or -1 for a drop (its queue was full).
func gcra(sendNs []int64, rate, burst float64, maxDelay time.Duration) []int64 {
	T := 1e9 / rate
	tau := (burst - 1) * T
	tat := float64(sendNs[0])
	out := make([]int64, len(sendNs))
	for i, s := range sendNs {
		t := float64(s)
		dep := math.Max(t, tat-tau)
		if dep-t > float64(maxDelay) {
			out[i] = -1
			continue
		}
		out[i] = int64(dep)
		tat = math.Max(tat, t) + T
	}
	return out
}

// quantile of xs (sorted here) by nearest rank.
func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// lastStatField reads name=value from packetshaper's last stats line.
func lastStatField(t *testing.T, log, name string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?:^|\s)` + regexp.QuoteMeta(name) + `=(\d+(?:\.\d+)?)`)
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := re.FindStringSubmatch(lines[i]); m != nil && strings.Contains(lines[i], "stats") {
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
	}
	t.Fatalf("no %s= in packetshaper's stats lines:\n%s", name, indent(log))
	return 0
}

// TestShapeUDPPacing: one UDP flow sent at 500 packets/s for 3 s through
// --pps 100 --shape --max-delay 1s (burst 5). What arrives is what a 100
// packets/s queue passes (≥ 99 % of the ideal shaper over the actual send
// times), in order, paced: after the burst the median gap between
// departures is 10 ms ± 1 ms, and in no second do more arrive than the
// rate and the burst allow (plus the latest release's lateness); every
// packet waited at most max-delay (as packetshaper measured it; as the
// receiver saw it, plus the latest release and the way).
//
// packetshaper runs in the sender's namespace A on OUTPUT, so that the
// kernel's receive timestamp in B (SO_TIMESTAMPNS, taken as the packet
// crosses the veth pair, within the verdict's write) is its departure,
// free of the receiving process's scheduling; psend numbers the packets, so
// each departure is compared with its own send time.
//
// The timing figures (gaps p1 and p99 within ±1 ms, departure lateness p99
// ≤ 200 µs, a delay at most 1 ms beyond max-delay) hold on a quiet machine
// only: on a loaded one a process that is not real-time waits for a CPU now
// and then, for milliseconds. They are checked with timing.Check: enforced
// under PS_STRICT_TIMING=1 (scripts/bench.sh's shape part), reported
// otherwise. The pacing assertions above hold with one core busy.
func TestShapeUDPPacing(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{{"default", nil}, {"rt-priority", []string{"--rt-priority", "1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			needShaper(t)
			tp := newTopo(t)
			tp.rulesIn(tp.A, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
			sh := tp.startShaperIn(tp.A, append([]string{"--queue", "0", "--pps", "100", "--shape", "--max-delay", "1s", "--stats-interval", "0"}, tc.args...)...)
			rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s", "--times")
			s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "3s", "--times", "--seq")
			r := recvDone(rc, 35*time.Second)
			log := tp.stopShaper(sh)
			checkPacing(t, s, r, log, 100, 5, time.Second)
		})
	}
}

// checkPacing checks one flow (source port 10000 to port 9000, numbered by
// --seq) through a shaper of rate packets/s, burst and maxDelay, as
// TestShapeUDPPacing says.
func checkPacing(t *testing.T, s sendResult, r recvResult, log string, rate, burst float64, maxDelay time.Duration) {
	t.Helper()
	// The timing figures' bounds (timing.Check: enforced only under
	// PS_STRICT_TIMING=1), and the way's allowance that holds on a loaded
	// machine.
	const gapTol, delayTol, lateMax = 1e6, 1e6, 200.0
	const wayTol = 50e6
	f, ok := s.Flows["10000"]
	if !ok {
		t.Fatalf("sender reports no flow 10000: %+v", s)
	}
	sent := sendTimes(s, "10000")
	deps := gcra(sent, rate, burst, maxDelay)
	want := 0
	for _, d := range deps {
		if d >= 0 {
			want++
		}
	}
	rx, seqs := r.RxNs["9000"]["10000"], r.Seqs["9000"]["10000"]
	got := len(rx)
	t.Logf("sent %d in %.2f s; arrived %d; an ideal %g/s shaper (burst %g, max delay %v) over the send times passes %d",
		f.Sent, s.Seconds, got, rate, burst, maxDelay, want)
	if float64(got) < 0.99*float64(want) || got > want+2 {
		t.Errorf("arrived %d, want at least 99%% of %d (and not more)", got, want)
	}
	if acc := uint64(lastStatField(t, log, "accepted")); acc != uint64(got) {
		t.Errorf("packetshaper accepted %d, %d arrived", acc, got)
	}
	// Each packet: in order, and at most max-delay after it was sent.
	var delays []float64
	notInModel := 0
	for i := range rx {
		q := seqs[i]
		if q < 0 || q >= int64(len(sent)) || rx[i] == 0 {
			t.Fatalf("arrival %d: seq %d, receive time %d", i, q, rx[i])
		}
		if i > 0 && q <= seqs[i-1] {
			t.Errorf("arrival %d: seq %d after seq %d: out of order", i, q, seqs[i-1])
		}
		if deps[q] < 0 {
			notInModel++
		}
		delays = append(delays, float64(rx[i]-sent[q]))
	}
	maxD := quantile(delays, 1)
	t.Logf("delays (kernel receive time in B − send time): p50 %.1f ms, p99 %.1f ms, max %.3f ms; packetshaper's delay_max_us %.0f; %d arrivals the ideal shaper drops",
		quantile(delays, 0.5)/1e6, quantile(delays, 0.99)/1e6, maxD/1e6, lastStatField(t, log, "delay_max_us"), notInModel)
	// A packet leaves at most max-delay after it arrived (the engine's
	// delays, checked below), plus how late its verdict was written (the
	// release lateness, bounded at p99 below; its max is one scheduling
	// hiccup of the machine), plus the way.
	lateWorst := lastStatField(t, log, "late_max_us") * 1e3
	if maxD > float64(maxDelay)+wayTol+lateWorst {
		t.Errorf("a packet waited %.3f ms, more than max-delay %v (+%.0f ms for the way, +%.3f ms the latest release)", maxD/1e6, maxDelay, wayTol/1e6, lateWorst/1e6)
	}
	timing.Check(t, maxD <= float64(maxDelay)+delayTol+lateWorst,
		"a packet waited %.3f ms, more than max-delay %v (+%.0f ms for the way, +%.3f ms the latest release)", maxD/1e6, maxDelay, delayTol/1e6, lateWorst/1e6)
	if d := lastStatField(t, log, "delay_max_us"); d > float64(maxDelay.Microseconds()) {
		t.Errorf("packetshaper's delay_max_us %.0f > max-delay %v", d, maxDelay)
	}
	// Gaps: after the burst, one packet every 1/rate.
	period := 1e9 / rate
	var gaps []float64
	for i := int(burst) + 5; i+1 < len(rx); i++ {
		gaps = append(gaps, float64(rx[i+1]-rx[i]))
	}
	lo, med, hi := quantile(gaps, 0.01), quantile(gaps, 0.5), quantile(gaps, 0.99)
	t.Logf("gaps between departures after the burst (%d): p1 %.3f ms, p50 %.3f ms, p99 %.3f ms, min %.3f, max %.3f",
		len(gaps), lo/1e6, med/1e6, hi/1e6, quantile(gaps, 0)/1e6, quantile(gaps, 1)/1e6)
	// Paced, with one core busy: the median gap is the period (a late
	// release is followed by a short gap, the median stays).
	if len(gaps) < 100 {
		t.Fatalf("only %d gaps after the burst, want the 3 s of traffic's", len(gaps))
	}
	if med < period-1e6 || med > period+1e6 {
		t.Errorf("median gap %.3f ms, want %.0f ms ± 1 ms: not paced at the rate", med/1e6, period/1e6)
	}
	// And never faster than the rate: departures are scheduled as the
	// bucket allows (at most rate × W + burst in any W) and leave at most
	// the latest release's lateness (+1 ms for the way) after their time,
	// so in any second at most rate × (1 s + that) + burst arrive, however
	// loaded the machine.
	win := int64(time.Second)
	bound := rate*(float64(win)+lateWorst+1e6)/1e9 + burst
	worst, at := 0, 0
	for i, j := 0, 0; i < len(rx); i++ {
		j = max(j, i)
		for j+1 < len(rx) && rx[j+1]-rx[i] <= win {
			j++
		}
		if n := j - i + 1; n > worst {
			worst, at = n, i
		}
	}
	t.Logf("most arrivals in one second: %d (from arrival %d), bound %.1f", worst, at, bound)
	if float64(worst) > bound {
		t.Errorf("%d packets arrived within 1 s (from arrival %d), want at most %.1f: faster than the rate", worst, at, bound)
	}
	timing.Check(t, lo >= period-gapTol && hi <= period+gapTol,
		"gaps p1 %.3f ms / p99 %.3f ms, want %.0f ms ± %.0f ms", lo/1e6, hi/1e6, period/1e6, gapTol/1e6)
	// Lateness of the verdicts, as packetshaper measured it.
	late := lastStatField(t, log, "late_p99_us")
	t.Logf("departure lateness: p50 %.0f µs, p99 %.0f µs, max %.0f µs (load average %s)",
		lastStatField(t, log, "late_p50_us"), late, lastStatField(t, log, "late_max_us"), timing.Load())
	timing.Check(t, late <= lateMax, "lateness p99 %.0f µs, want ≤ %.0f µs", late, lateMax)
	if o := lastStatField(t, log, "shape_overflow"); o == 0 {
		t.Errorf("shape_overflow = 0: the queue never filled, the test shows nothing")
	}
}

// TestShapeReloadKeepsHeld: a SIGHUP reload in the middle of shaping, with
// the shaping rule unchanged (another rule changes), keeps the held packets
// and their departure times and the rule's queue: pacing goes on as if
// nothing happened. (With --rt-priority 1, as the README advises for loaded
// machines; the timing figures are checked as in TestShapeUDPPacing.)
func TestShapeReloadKeepsHeld(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	tp.rulesIn(tp.A, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	pol := filepath.Join(t.TempDir(), "shape.toml")
	write := func(other int) {
		text := fmt.Sprintf("[[rule]]\nname = \"other\"\nmatch = { dport = [\"9999\"], proto = [\"udp\"] }\npps = %d\n\n"+
			"[[rule]]\nname = \"paced\"\npps = 100\nshape = true\nmax-delay = \"1s\"\n", other)
		if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	sh := tp.startShaperIn(tp.A, "--queue", "0", "--policy", pol, "--stats-interval", "0", "--rt-priority", "1")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s", "--times")
	sp := tp.startSend("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "3s", "--times", "--seq")
	time.Sleep(1500 * time.Millisecond)
	held := tp.queueIn(tp.A, 0).Waiting
	write(2)
	sh.signal(syscall.SIGHUP)
	sh.waitStderr("kept_state=paced", 5*time.Second)
	s := sendDone(sp)
	r := recvDone(rc, 35*time.Second)
	log := tp.stopShaper(sh)
	t.Logf("%d packets held in the kernel at the reload", held)
	if held < 50 {
		t.Errorf("only %d packets held at the reload, want the queue about full (100)", held)
	}
	checkPacing(t, s, r, log, 100, 5, time.Second)
}

// TestShapeStop: with packets held, SIGTERM gives every one of them its
// verdict at once (all arrive, promptly, and nothing stays queued); after
// SIGKILL the kernel unbinds the queue and traffic flows on through bypass.
func TestShapeStop(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			needShaper(t)
			tp := newTopo(t)
			tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
			// 10 packets/s, burst 1: of 40 packets sent within 0.2 s one
			// passes at once, 39 are held, the last until 3.9 s later.
			sh := tp.startShaper("--queue", "0", "--pps", "10", "--burst", "1", "--shape", "--max-delay", "5s", "--stats-interval", "0",
				"--metrics-addr", "127.0.0.1:9464")
			rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "2s", "--times")
			s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "200", "--duration", "200ms")
			time.Sleep(300 * time.Millisecond)
			held := tp.queue(0).Waiting
			if held < 30 {
				t.Fatalf("%d packets waiting in the kernel's queue before the %v, want about 36", held, sig)
			}
			// The metrics say so: every packet but the first (the burst)
			// was delayed, none overflowed, and about as many as the
			// kernel holds are held (one leaves every 100 ms).
			m := tp.metricsIn(tp.B, "9464")
			delayed := fmt.Sprint(s.Sent - 1)
			for _, want := range []string{
				"packetshaper_delayed_total{queue=\"0\"} " + delayed + "\n",
				"packetshaper_shape_overflow_total{queue=\"0\"} 0\n",
				"packetshaper_shape_delay_seconds_count{queue=\"0\"} " + delayed + "\n",
				"packetshaper_rule_delayed_total{path=\"queue\",queue=\"0\",rule=\"default\"} " + delayed + "\n",
				"packetshaper_held_max{queue=\"0\"} 1024\n",
			} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %q:\n%s", want, m)
				}
			}
			if g := regexp.MustCompile(`packetshaper_held\{queue="0"\} (\d+)`).FindStringSubmatch(m); g == nil {
				t.Errorf("metrics lack packetshaper_held:\n%s", m)
			} else if n, _ := strconv.ParseUint(g[1], 10, 64); n+3 < held || n > held {
				t.Errorf("packetshaper_held %d, the kernel holds %d", n, held)
			}
			t0 := time.Now()
			sh.signal(sig)
			if sig == syscall.SIGTERM {
				if err := sh.wait(5 * time.Second); err != nil {
					t.Fatalf("exit after SIGTERM: %v", err)
				}
			} else {
				sh.wait(5 * time.Second)
			}
			took := time.Since(t0)
			var after sendResult
			if sig == syscall.SIGKILL {
				// The queue is unbound with the process: new packets pass by
				// bypass.
				after = tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10001", "--pps", "200", "--duration", "500ms")
			}
			r := recvDone(rc, 10*time.Second)
			got := r.Received["9000"]["10000"]
			t.Logf("%v with %d held: exit after %v; %d of %d sent arrived (%d before the signal); queue after: %+v",
				sig, held, took, got, s.Sent, got-uint64(countAfter(r.TimesNs["9000"]["10000"], t0.UnixNano())), tp.queue(0))
			if q := tp.queue(0); q.Bound || q.Waiting != 0 {
				t.Errorf("after %v the queue is %+v, want unbound and empty", sig, q)
			}
			switch sig {
			case syscall.SIGTERM:
				if got != s.Sent {
					t.Errorf("after SIGTERM %d of %d arrived, want all: every held packet accepted", got, s.Sent)
				}
				if n := countAfter(r.TimesNs["9000"]["10000"], t0.UnixNano()+int64(time.Second)); n != 0 {
					t.Errorf("%d held packets arrived more than 1 s after SIGTERM, want all at once", n)
				}
				timing.Check(t, took <= 1500*time.Millisecond, "exit took %v after SIGTERM, want at most 1.5 s", took)
			case syscall.SIGKILL:
				if g := r.Received["9000"]["10001"]; g != after.Sent {
					t.Errorf("after SIGKILL %d of %d new packets arrived, want all (bypass)", g, after.Sent)
				}
				// What the kernel does with the packets held when the
				// process dies is its business: reported, not required.
				t.Logf("of the %d packets held at SIGKILL, %d arrived", held, countAfter(r.TimesNs["9000"]["10000"], t0.UnixNano()))
			}
		})
	}
}

// cpuSeconds is the CPU time (user + system) a running process has used.
func cpuSeconds(p *proc) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// countAfter counts the times at or after t.
func countAfter(ts []int64, t int64) int {
	n := 0
	for _, x := range ts {
		if x >= t {
			n++
		}
	}
	return n
}

// iperfResult is what an iperf3 client run reports (-J).
type iperfResult struct {
	End struct {
		SumSent struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// iperf runs one iperf3 TCP transfer from A to B for d and returns the
// receiver's goodput (bits/s) and the sender's retransmissions.
func iperf(t *testing.T, tp *topo, d time.Duration) (float64, int) {
	t.Helper()
	srv := tp.start(tp.B, "iperf3 server", "iperf3", "-s", "-1", "-p", "5201", "--forceflush")
	srv.waitStdout("Server listening", 5*time.Second)
	out, err := tp.run(tp.A, "iperf3", "-c", tp.IPB, "-p", "5201", "-t", strconv.Itoa(int(d.Seconds())), "-J")
	if err != nil {
		t.Fatalf("iperf3 client: %v\n%s", err, out)
	}
	srv.wait(10 * time.Second)
	var r iperfResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("iperf3 -J: %v\n%s", err, out)
	}
	return r.End.SumReceived.BitsPerSecond, r.End.SumSent.Retransmits
}

// TestShapeTCP: one TCP transfer (iperf3) at 20 Mbit/s through packetshaper
// shaping (--bitrate 20mbit --shape --max-delay 50ms) and through
// packetshaper policing (--bitrate 20mbit). Neither packetshaper's goodput
// is over the rate (5 % margin: the burst, 0.1 s of the rate, spreads over
// the transfer's 5 s: 2 %), and the shaper delayed packets rather than
// dropping them all. Those are the assertions, and one 5 s transfer each
// shows them.
//
// The speed figures, the shaper's goodput at least 95 % of 20 Mbit/s and
// at least 0.98 × the kernel's tc tbf's (rate 20mbit, the same burst and
// latency, on A's egress), are checked with timing.Check, enforced by
// scripts/bench.sh's shape part (PS_STRICT_TIMING=1): only then does the
// test measure them as a benchmark must, with 10 s transfers, the three
// ways (shaper, tbf, policer) twice in the same run, best of 2; otherwise
// the figures it reports come from the one round.
func TestShapeTCP(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	dur, rounds := 5*time.Second, 1
	if timing.Strict() {
		dur, rounds = 10*time.Second, 2
	}
	type res struct {
		bps     float64
		retrans int
	}
	results := map[string][]res{}
	delayed := 0.0
	ps := func(name string, args ...string) {
		tp.rules("add", "--queue", "0", "--proto", "tcp", "--dport", "5201", "--family", "ipv4")
		sh := tp.startShaper(append([]string{"--queue", "0", "--stats-interval", "0"}, args...)...)
		cpu0 := cpuSeconds(sh)
		bps, rt := iperf(t, tp, dur)
		cpu := cpuSeconds(sh) - cpu0
		log := tp.stopShaper(sh)
		tp.rules("del", "--queue", "0", "--proto", "tcp", "--dport", "5201", "--family", "ipv4")
		results[name] = append(results[name], res{bps, rt})
		if name == "shaper" {
			delayed += lastStatField(t, log, "delayed")
		}
		t.Logf("%s: %.2f Mbit/s, %d retransmissions; packetshaper CPU %.1f %%, held peak %.0f, delayed %.0f, shape_overflow %.0f, late p50 %.0f µs p99 %.0f µs",
			name, bps/1e6, rt, 100*cpu/dur.Seconds(), lastStatField(t, log, "held_peak"), lastStatField(t, log, "delayed"), lastStatField(t, log, "shape_overflow"),
			lastStatField(t, log, "late_p50_us"), lastStatField(t, log, "late_p99_us"))
	}
	tbf := func() {
		tp.must(tp.A, "tc", "qdisc", "add", "dev", tp.VethA, "root", "tbf", "rate", "20mbit", "burst", "250000", "latency", "50ms")
		bps, rt := iperf(t, tp, dur)
		tp.must(tp.A, "tc", "qdisc", "del", "dev", tp.VethA, "root")
		results["tbf"] = append(results["tbf"], res{bps, rt})
		t.Logf("tc tbf: %.2f Mbit/s, %d retransmissions", bps/1e6, rt)
	}
	for round := 0; round < rounds; round++ {
		ps("shaper", "--bitrate", "20mbit", "--shape", "--max-delay", "50ms")
		if timing.Strict() {
			tbf()
		}
		ps("policer", "--bitrate", "20mbit")
	}
	best := func(name string) res {
		var b res
		for _, r := range results[name] {
			if r.bps > b.bps {
				b = r
			}
		}
		return b
	}
	sh, tb, po := best("shaper"), best("tbf"), best("policer")
	if !timing.Strict() {
		t.Logf("shaper %.2f Mbit/s (%.1f %% of 20, %d retrans), policer %.2f Mbit/s (%.1f %%, %d retrans); tbf not run (PS_STRICT_TIMING=1 compares)",
			sh.bps/1e6, sh.bps/20e4, sh.retrans, po.bps/1e6, po.bps/20e4, po.retrans)
	} else {
		t.Logf("best of %d: shaper %.2f Mbit/s (%.1f %% of 20, %.3f × tbf, %d retrans), tbf %.2f Mbit/s (%d retrans), policer %.2f Mbit/s (%.1f %%, %d retrans)",
			rounds, sh.bps/1e6, sh.bps/20e4, sh.bps/tb.bps, sh.retrans, tb.bps/1e6, tb.retrans, po.bps/1e6, po.bps/20e4, po.retrans)
	}
	for _, name := range []string{"shaper", "policer"} {
		for _, r := range results[name] {
			if r.bps > 1.05*20e6 {
				t.Errorf("%s: goodput %.2f Mbit/s, over the 20 Mbit/s limit", name, r.bps/1e6)
			}
		}
	}
	if sh.bps == 0 || delayed == 0 {
		t.Errorf("the shaper passed %.2f Mbit/s and delayed %.0f packets: not shaping", sh.bps/1e6, delayed)
	}
	timing.Check(t, sh.bps >= 0.95*20e6, "shaped goodput %.2f Mbit/s, want ≥ 95 %% of 20 Mbit/s", sh.bps/1e6)
	if timing.Strict() {
		timing.Check(t, sh.bps >= 0.98*tb.bps, "shaped goodput %.2f Mbit/s, want ≥ 0.98 × tbf's %.2f", sh.bps/1e6, tb.bps/1e6)
	}
}
