package e2e

import (
	"fmt"
	"math"
	"os/exec"
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

// The global limit's end-to-end test: three packetshaper processes (each
// its own queue, in one namespace) share one global rule keyed by
// destination through a redis-server started in that namespace, on its
// loopback. Senders in the other namespace spread over them by destination
// port (9000, 9001, 9002: queues 0, 1, 2), all to one destination address:
// one key.

const (
	gRate   = 3000.0 // the global rule: packets/s per destination
	gBurst  = 600.0  // twice the slack (0.1 × 3000): the fewest asks, and room for a late one
	gSlack  = 0.1
	gHosts  = 3
	gRedis  = 6391 // redis-server's port on B's loopback
	gPort0  = 9000
	gPolicy = `
[redis]
addrs = ["127.0.0.1:%d"]

[[rule]]
name  = "perdst"
match = { proto = ["udp"] }
key   = "dst"
pps   = %g
burst = %g
scope = "global"
global-slack = %g
`
)

// gLoad is what one host's sender offers: flows × pps each.
type gLoad struct {
	flows int
	pps   float64
}

// gRun is one run of the three shapers.
type gRun struct {
	sent                []sendResult
	recv                recvResult
	logs                []string
	decided, queued     []uint64 // per shaper: packets it decided; the kernel's count of packets queued to it
	firstNs, lastNs     int64    // first and last packet sent, any host
	cmds                int64    // commands the store received from the shapers
	p99us               []float64
	killedNs, restartNs int64 // the outage, if any
}

func (r *gRun) secs() float64 { return float64(r.lastNs-r.firstNs) / 1e9 }

func (r *gRun) received() float64 { return float64(r.recv.Total) }

// needRedisServer fails the test when redis-server is missing (CI, as root,
// must have it: scripts/test.sh installs it).
func needRedisServer(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e: %s not found in PATH (apt-get install redis-server redis-tools; scripts/test.sh does)", tool)
		}
	}
}

// startRedisIn runs redis-server in ns on 127.0.0.1:port, without
// persistence, and waits until it answers.
func (tp *topo) startRedisIn(ns string, port int) *proc {
	tp.t.Helper()
	p := tp.start(ns, "redis-server", "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tp.t.TempDir(), "--loglevel", "warning")
	deadline := time.Now().Add(10 * time.Second)
	for !tp.redisUp(ns, port) {
		if p.exited() || time.Now().After(deadline) {
			tp.t.Fatalf("redis-server in %s does not answer (exited: %v)\n%s", ns, p.exited(), indent(p.out.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

func (tp *topo) redisUp(ns string, port int) bool {
	out, err := tp.run(ns, "redis-cli", "-p", strconv.Itoa(port), "ping")
	return err == nil && strings.TrimSpace(out) == "PONG"
}

// redisClientCommands is how many commands clients sent the store (its
// commandstats: EVALSHA, EVAL, SCRIPT, PING), not the calls its scripts
// make inside (which total_commands_processed counts too).
func (tp *topo) redisClientCommands(ns string, port int) int64 {
	tp.t.Helper()
	out := tp.must(ns, "redis-cli", "-p", strconv.Itoa(port), "info", "commandstats")
	var n int64
	for _, l := range strings.Split(out, "\n") {
		for _, c := range []string{"evalsha", "eval", "script", "ping"} {
			p := "cmdstat_" + c + ":calls="
			if strings.HasPrefix(l, p) {
				v, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), p), ",")
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// runGlobal starts the three shapers, offers each its load for dur, and
// runs outage (if not nil) in the middle; it stops everything and collects
// the counts. The store starts empty (FLUSHALL).
func runGlobal(t *testing.T, tp *topo, pol string, redis **proc, loads [gHosts]gLoad, dur time.Duration, outage func(r *gRun)) *gRun {
	t.Helper()
	tp.must(tp.B, "redis-cli", "-p", strconv.Itoa(gRedis), "flushall")
	var shapers []*proc
	for q := range gHosts {
		p := tp.start(tp.B, fmt.Sprintf("packetshaper q%d", q), shaperBin, "--queue", strconv.Itoa(q), "--policy", pol,
			"--stats-interval", "250ms", "--latency")
		tp.waitBound(p, q)
		shapers = append(shapers, p)
	}
	for _, p := range shapers {
		p.waitStderr("global_rules=perdst", 5*time.Second)
	}
	var listen []string
	for q := range gHosts {
		listen = append(listen, ":"+strconv.Itoa(gPort0+q))
	}
	rc := tp.startRecv(strings.Join(listen, ","), "--duration", "60s", "--idle", "2s", "--bins", "100ms")
	r := &gRun{}
	cmd0 := tp.redisClientCommands(tp.B, gRedis)
	var senders []*proc
	for q, l := range loads {
		senders = append(senders, tp.startSend("--dst", fmt.Sprintf("%s:%d", tp.IPB, gPort0+q), "--flows", strconv.Itoa(l.flows),
			"--sport", strconv.Itoa(10000+100*q), "--pps", fmt.Sprint(l.pps), "--duration", dur.String(), "--times"))
	}
	if outage != nil {
		outage(r)
	}
	for _, s := range senders {
		r.sent = append(r.sent, sendDone(s))
	}
	r.recv = recvDone(rc, 30*time.Second)
	if *redis != nil && !(*redis).exited() {
		r.cmds = tp.redisClientCommands(tp.B, gRedis) - cmd0
	}
	for q, p := range shapers {
		st := tp.queue(q)
		if st.Waiting != 0 {
			t.Errorf("queue %d: %d packets waiting for a verdict after the run", q, st.Waiting)
		}
		r.queued = append(r.queued, st.IDSequence)
		log := tp.stopShaper(p)
		r.logs = append(r.logs, log)
		_, _, line := finalStats(t, log)
		r.decided = append(r.decided, statField(t, line, "packets"))
		r.p99us = append(r.p99us, float64(statField(t, line, "lat_p99_us")))
	}
	r.firstNs, r.lastNs = math.MaxInt64, 0
	for _, s := range r.sent {
		for _, f := range s.Flows {
			r.firstNs = min(r.firstNs, f.FirstNs)
			r.lastNs = max(r.lastNs, f.FirstNs+f.TimesUs[len(f.TimesUs)-1]*1000)
		}
	}
	// Every packet sent reached a shaper and got its verdict.
	var sent, decided uint64
	for q := range gHosts {
		sent += r.sent[q].Sent
		decided += r.decided[q]
		if r.decided[q] != r.queued[q] {
			t.Errorf("shaper %d decided %d packets, the kernel queued %d to it", q, r.decided[q], r.queued[q])
		}
	}
	if decided != sent {
		t.Errorf("%d packets sent, %d decided", sent, decided)
	}
	return r
}

var statFieldRe = regexp.MustCompile(`([a-z0-9_.]+)=([0-9.]+)`)

// statField reads NAME=N from a stats line.
func statField(t *testing.T, line, name string) uint64 {
	t.Helper()
	for _, m := range statFieldRe.FindAllStringSubmatch(line, -1) {
		if m[1] == name {
			v, _ := strconv.ParseFloat(m[2], 64)
			return uint64(v)
		}
	}
	t.Fatalf("no %s= in %q", name, line)
	return 0
}

// idealBuckets is what token buckets of rate and burst, one per host, let
// through of each host's packets (their send times): the count a local rule
// gives (rate, burst), or a static split of the limit (rate/N, burst/N).
func idealBuckets(r *gRun, rate, burst float64) float64 {
	var n float64
	for _, s := range r.sent {
		b := bucket{rate: rate, burst: burst}
		for _, ns := range sendTimes(s, sortedPorts(s.Flows)...) {
			if b.allow(ns) {
				n++
			}
		}
	}
	return n
}

// idealGlobal is what one ideal token bucket of rate and burst lets through
// of all the hosts' packets together, at their send times: burst + rate ×
// T for senders that kept sending, less when a sender stalled on a loaded
// machine (the refill of a stall beyond the burst is lost to any bucket).
func idealGlobal(r *gRun, rate, burst float64) float64 {
	var ts []int64
	for _, s := range r.sent {
		ts = append(ts, sendTimes(s, sortedPorts(s.Flows)...)...)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	b := bucket{rate: rate, burst: burst}
	var n float64
	for _, ns := range ts {
		if b.allow(ns) {
			n++
		}
	}
	return n
}

// logTime is the time= of the first line of log containing s.
func logTime(t *testing.T, log, s string) time.Time {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, s) {
			continue
		}
		m := regexp.MustCompile(`time=(\S+)`).FindStringSubmatch(l)
		if m == nil {
			break
		}
		tm, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("time in %q: %v", l, err)
		}
		return tm
	}
	t.Fatalf("no %q in the log:\n%s", s, indent(log))
	return time.Time{}
}

// TestGlobalLimit: one global rule, three packetshaper processes.
//
//   - Senders spread evenly (each host far above the limit): the aggregate
//     received is within ±5 % of burst + rate × duration (exactly: of what
//     one ideal bucket lets through of all the packets at their actual send
//     times, which is that unless a sender stalled on a loaded machine),
//     where a local rule would let about three times that through
//     (computed: one ideal bucket per host over the send times).
//   - Senders at uneven rates (most traffic through one host): the same
//     ±5 %, where a static split of the limit (rate/3 per host) lets far
//     less through; at most 0.03 commands to the store per accepted packet
//     (rate 3000, global-slack 0.1).
//   - The same uneven load with redis-server killed in the middle and
//     restarted: every packet still gets its verdict, the aggregate during
//     the outage at most 1.1× the limit, each host says once that it fell
//     back and once that it is back (and, timing figures checked with
//     timing.Check, is back on leases within 2 s of the restart, verdict
//     latency p99 at most 2× the run with the store).
func TestGlobalLimit(t *testing.T) {
	needShaper(t)
	needRedisServer(t)
	tp := newTopo(t)
	redis := tp.startRedisIn(tp.B, gRedis)
	pol := filepath.Join(t.TempDir(), "global.toml")
	writePolicy(t, pol, fmt.Sprintf(gPolicy, gRedis, gRate, gBurst, gSlack))
	for q := range gHosts {
		tp.rules("add", "--queue", strconv.Itoa(q), "--proto", "udp", "--dport", strconv.Itoa(gPort0+q), "--family", "ipv4")
	}
	limit := func(secs float64) float64 { return gBurst + gRate*secs }

	// Even: 4000 packets/s through each host.
	even := runGlobal(t, tp, pol, &redis, [gHosts]gLoad{{4, 1000}, {4, 1000}, {4, 1000}}, 5*time.Second, nil)
	want := idealGlobal(even, gRate, gBurst)
	local := idealBuckets(even, gRate, gBurst)
	t.Logf("even: received %.0f in %.2f s: %.3f× burst + rate × T (%.0f), %.3f× one ideal bucket over the send times (%.0f); a local rule: %.0f (%.2f×); %d commands, %.4f per accepted packet",
		even.received(), even.secs(), even.received()/limit(even.secs()), limit(even.secs()), even.received()/want, want, local, local/want, even.cmds, float64(even.cmds)/even.received())
	checkWithin(t, "even: aggregate received against one ideal bucket", even.received(), want, 0.05)
	if local < 2.5*want {
		t.Errorf("even: a local rule would let %.0f through, not about 3× %.0f: the load does not show the difference", local, want)
	}

	// Uneven: 6000 packets/s through one host, 300 through each other.
	uneven := runGlobal(t, tp, pol, &redis, [gHosts]gLoad{{4, 1500}, {1, 300}, {1, 300}}, 5*time.Second, nil)
	want = idealGlobal(uneven, gRate, gBurst)
	split := idealBuckets(uneven, gRate/gHosts, gBurst/gHosts)
	per := float64(uneven.cmds) / uneven.received()
	t.Logf("uneven: received %.0f in %.2f s: %.3f× burst + rate × T (%.0f), %.3f× one ideal bucket (%.0f); a static 1/%d split: %.0f (%.2f×); %d commands, %.4f per accepted packet; p99 %v µs",
		uneven.received(), uneven.secs(), uneven.received()/limit(uneven.secs()), limit(uneven.secs()), uneven.received()/want, want, gHosts, split, split/want, uneven.cmds, per, uneven.p99us)
	checkWithin(t, "uneven: aggregate received against one ideal bucket", uneven.received(), want, 0.05)
	if split > 0.7*want {
		t.Errorf("uneven: a static split would let %.0f through, not far less than %.0f: the load does not show the difference", split, want)
	}
	if per > 0.03 {
		t.Errorf("uneven: %.4f commands per accepted packet, want at most 0.03", per)
	}

	// Uneven, with the store killed 3 s in and restarted 3 s later.
	out := runGlobal(t, tp, pol, &redis, [gHosts]gLoad{{4, 1500}, {1, 300}, {1, 300}}, 9*time.Second, func(r *gRun) {
		time.Sleep(3 * time.Second)
		redis.signal(syscall.SIGKILL)
		redis.wait(5 * time.Second)
		r.killedNs = time.Now().UnixNano()
		time.Sleep(3 * time.Second)
		redis = tp.startRedisIn(tp.B, gRedis)
		r.restartNs = time.Now().UnixNano()
	})
	// Received during the outage: whole 100 ms bins from the kill to the
	// restart.
	var during float64
	var from, to int64 = math.MaxInt64, 0
	for k, n := range out.recv.Bins {
		b, _ := strconv.ParseInt(k, 10, 64)
		if b >= out.killedNs && b+int64(100*time.Millisecond) <= out.restartNs {
			during += float64(n)
			from, to = min(from, b), max(to, b+int64(100*time.Millisecond))
		}
	}
	outSecs := float64(to-from) / 1e9
	t.Logf("outage: received %.0f in the %.1f s between kill and restart: %.3f× burst + rate × T (%.0f); p99 %v µs (with the store %v µs)",
		during, outSecs, during/limit(outSecs), limit(outSecs), out.p99us, uneven.p99us)
	if during > 1.1*limit(outSecs) {
		t.Errorf("outage: %.0f received in %.1f s, over 1.1× the limit %.0f", during, outSecs, limit(outSecs))
	}
	for q, log := range out.logs {
		if n := strings.Count(log, "the store does not answer"); n != 1 {
			t.Errorf("shaper %d: %d fallback lines, want 1:\n%s", q, n, indent(log))
		}
		if n := strings.Count(log, "the store answers again"); n != 1 {
			t.Errorf("shaper %d: %d lines saying it is back, want 1:\n%s", q, n, indent(log))
		}
		if !strings.Contains(log, "rule.perdst.global_mode=fallback") || !strings.Contains(log, "rule.perdst.global_mode=leases") {
			t.Errorf("shaper %d: the stats do not show the fallback and the leases:\n%s", q, indent(log))
		}
		back := logTime(t, log, "the store answers again").Sub(time.Unix(0, out.restartNs))
		t.Logf("shaper %d: back on leases %v after the store answered again", q, back.Round(time.Millisecond))
		timing.Check(t, back <= 2*time.Second, "shaper %d: back on leases %v after the restart, want at most 2 s", q, back)
	}
	// Verdict latency: the worst shaper's p99 against the worst with the
	// store up, same load (the kernel's receive timestamp to the verdict).
	worst := func(v []float64) float64 { s := append([]float64(nil), v...); sort.Float64s(s); return s[len(s)-1] }
	w, base := worst(out.p99us), worst(uneven.p99us)
	timing.Check(t, w <= 2*math.Max(base, 50), "verdict latency p99 %.0f µs with the outage, over 2× the %.0f µs without", w, base)
}
