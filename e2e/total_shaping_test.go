package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// totalShapingPolicy is issue 32's shaping example: each guest host 5
// Mbit/s, shaped (held up to 50 ms), and the guests 20 Mbit/s in all,
// shared fairly among the hosts with packets waiting.
const totalShapingPolicy = `
[[total]]
name    = "guests"
bitrate = "20mbit"

[[rule]]
name      = "per-guest"
match     = { proto = ["tcp"], dport = ["5201-5208"] }
key       = "src"
bitrate   = "5mbit"
shape     = true
max-delay = "50ms"
total     = "guests"
`

// jain is Jain's fairness index of xs: (Σx)² / (n Σx²), 1 when all are
// equal, 1/n when one has everything.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// iperfFrom runs one iperf3 TCP client per source address in srcs at once,
// source i to B's port 5201+i, for d, and returns each receiver's goodput
// (bits/s).
func iperfFrom(t *testing.T, tp *topo, srcs []string, d time.Duration) []float64 {
	t.Helper()
	bps := make([]float64, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := tp.run(tp.A, "iperf3", "-c", tp.IPB, "-p", strconv.Itoa(5201+i), "-B", src, "-t", strconv.Itoa(int(d.Seconds())), "-J")
			if err != nil {
				errs[i] = fmt.Errorf("iperf3 client %s: %v\n%s", src, err, out)
				return
			}
			var r iperfResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				errs[i] = fmt.Errorf("iperf3 -J from %s: %v\n%s", src, err, out)
				return
			}
			bps[i] = r.End.SumReceived.BitsPerSecond
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return bps
}

// htbGuests puts issue 32's HTB on A's egress: a 20 Mbit/s parent, a
// child per source in srcs of rate 2.5 Mbit/s, ceil 5 Mbit/s, each with an
// SFQ leaf (a pfifo one where the kernel has no sch_sfq: one flow per
// class either way) and a u32 filter on the source address. The
// namespace's removal removes it if the test stops early.
func htbGuests(tp *topo, srcs []string) {
	dev := tp.VethA
	tp.must(tp.A, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb")
	tp.must(tp.A, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "20mbit", "ceil", "20mbit")
	for i, src := range srcs {
		id := strconv.Itoa(10 + i)
		tp.must(tp.A, "tc", "class", "add", "dev", dev, "parent", "1:1", "classid", "1:"+id, "htb", "rate", "2.5mbit", "ceil", "5mbit")
		if out, err := tp.run(tp.A, "tc", "qdisc", "add", "dev", dev, "parent", "1:"+id, "handle", id+":", "sfq", "perturb", "10"); err != nil {
			// A kernel without sch_sfq: a FIFO leaf, the same for a
			// class of one TCP flow as here.
			tp.t.Logf("no SFQ leaf (%v: %s); a pfifo leaf instead", err, out)
			tp.must(tp.A, "tc", "qdisc", "add", "dev", dev, "parent", "1:"+id, "handle", id+":", "pfifo")
		}
		tp.must(tp.A, "tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "src", src+"/32", "flowid", "1:"+id)
	}
}

// TestTotalShaping is issue 32's shaping bar, beside tc HTB in the same run
// on the same veth pair: eight TCP senders (iperf3, one address each)
// through packetshaper's per-source 5 Mbit/s shaped under a total of 20
// Mbit/s (totalShapingPolicy), and through HTB (htbGuests); then two
// senders alone through packetshaper. Asserted always: no sender over its
// own 5 Mbit/s and the eight not over the 20 Mbit/s total (+5 %: the
// bursts, 0.1 s of each rate, over the 8 s transfer), the shaper delaying
// packets and no packet held longer than max-delay as packetshaper counts
// it. The speed figures — the eight's goodput ≥ 0.95 × 20 Mbit/s and ≥
// 0.98 × HTB's, Jain's index over them ≥ 0.99 and within 0.005 of HTB's,
// the two alone ≥ 0.95 × 5 Mbit/s each — are timing figures: reported,
// and enforced with PS_STRICT_TIMING=1 (timing.Check).
func TestTotalShaping(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	const dur = 8 * time.Second
	var srcs []string
	for i := range 8 {
		srcs = append(srcs, fmt.Sprintf("10.213.0.%d", 100+i))
		tp.must(tp.A, "ip", "addr", "add", srcs[i]+"/24", "dev", tp.VethA)
	}
	for i := range srcs {
		srv := tp.start(tp.B, "iperf3 server "+strconv.Itoa(5201+i), "iperf3", "-s", "-p", strconv.Itoa(5201+i), "--forceflush")
		srv.waitStdout("Server listening", 5*time.Second)
	}

	htbGuests(tp, srcs)
	htb := iperfFrom(t, tp, srcs, dur)
	tp.must(tp.A, "tc", "qdisc", "del", "dev", tp.VethA, "root")

	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	writePolicy(t, pol, totalShapingPolicy)
	tp.rules("add", "--queue", "0", "--proto", "tcp", "--dport", "5201-5208", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0", "--policy", pol, "--stats-interval", "0")
	eight := iperfFrom(t, tp, srcs, dur)
	log8 := tp.stopShaper(sh)
	sh = tp.startShaper("--queue", "0", "--policy", pol, "--stats-interval", "0")
	two := iperfFrom(t, tp, srcs[:2], 5*time.Second)
	log2 := tp.stopShaper(sh)

	sum := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s
	}
	mbit := func(xs []float64) string {
		s := ""
		for _, x := range xs {
			s += fmt.Sprintf(" %.2f", x/1e6)
		}
		return s
	}
	ps8, htb8, jps, jhtb := sum(eight), sum(htb), jain(eight), jain(htb)
	t.Logf("HTB: %.2f Mbit/s in all, Jain %.4f; each:%s", htb8/1e6, jhtb, mbit(htb))
	t.Logf("packetshaper: %.2f Mbit/s in all (%.3f × 20, %.3f × HTB), Jain %.4f; each:%s; delayed %.0f, shape_overflow %.0f, delay p99 %.0f µs, max %.0f µs",
		ps8/1e6, ps8/20e6, ps8/htb8, jps, mbit(eight), lastStatField(t, log8, "delayed"), lastStatField(t, log8, "shape_overflow"),
		lastStatField(t, log8, "delay_p99_us"), lastStatField(t, log8, "delay_max_us"))
	t.Logf("packetshaper, two alone:%s Mbit/s; delay p99 %.0f µs", mbit(two), lastStatField(t, log2, "delay_p99_us"))

	for _, run := range []struct {
		name string
		bps  []float64
		log  string
	}{{"eight", eight, log8}, {"two alone", two, log2}} {
		for i, b := range run.bps {
			if b > 1.05*5e6 {
				t.Errorf("%s: sender %s got %.2f Mbit/s, over its own 5 Mbit/s", run.name, srcs[i], b/1e6)
			}
		}
		if lastStatField(t, run.log, "delayed") == 0 {
			t.Errorf("%s: packetshaper delayed no packet: not shaping", run.name)
		}
		if d := lastStatField(t, run.log, "delay_max_us"); d > 50_000 {
			t.Errorf("%s: packetshaper held a packet %.0f µs, over max-delay 50 ms", run.name, d)
		}
	}
	if ps8 > 1.05*20e6 {
		t.Errorf("the eight got %.2f Mbit/s in all, over the 20 Mbit/s total", ps8/1e6)
	}
	timing.Check(t, ps8 >= 0.95*20e6, "the eight's goodput %.2f Mbit/s, want ≥ 0.95 × 20", ps8/1e6)
	timing.Check(t, ps8 >= 0.98*htb8, "the eight's goodput %.2f Mbit/s, want ≥ 0.98 × HTB's %.2f", ps8/1e6, htb8/1e6)
	timing.Check(t, jps >= 0.99 && jps >= jhtb-0.005, "Jain's index %.4f, want ≥ 0.99 and within 0.005 of HTB's %.4f", jps, jhtb)
	for i, b := range two {
		timing.Check(t, b >= 0.95*5e6, "two alone: sender %s got %.2f Mbit/s, want ≥ 0.95 × 5", srcs[i], b/1e6)
	}
}
