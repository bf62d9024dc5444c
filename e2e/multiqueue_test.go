package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// TestMultiQueueOneBucketPerKey: with --queue 20-23 (rules.sh --queue
// 20-23: iptables --queue-balance, which hashes addresses and protocol) and
// --key src, each source has one bucket whichever queue the kernel hands
// its packets to (issue 16, point 3: with one engine per queue a source
// sending to several addresses got up to 4 buckets, 3.99x the limit).
//
// Four sources in A each send to eight addresses of B. First one probe
// packet per source and destination, each on its own, shows from the
// kernel's queue counters which queue each pair goes to: every source must
// spread over at least two queues, and the four queues must all be used, or
// the test would prove nothing. Then each source sends 50 packets/s to each
// of its eight destinations for 3 s (400/s) against --pps 100 --burst 5:
// what each receives must be what one token bucket lets through over the
// send times (±5 %); packetshaper flows must list one flow per source with
// every packet of that source; status and the metrics count the rule's
// packets once, the queues' own per queue.
func TestMultiQueueOneBucketPerKey(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	const (
		srcs   = 4
		dsts   = 8
		pps    = 50 // per destination
		dur    = 3 * time.Second
		qFirst = 20
		qLast  = 23
	)
	var srcIPs, dstIPs []string
	for i := range srcs {
		srcIPs = append(srcIPs, fmt.Sprintf("10.213.0.%d", 100+i))
		tp.must(tp.A, "ip", "addr", "add", srcIPs[i]+"/24", "dev", tp.VethA)
	}
	for j := range dsts {
		dstIPs = append(dstIPs, fmt.Sprintf("10.213.0.%d", 200+j))
		tp.must(tp.B, "ip", "addr", "add", dstIPs[j]+"/24", "dev", tp.VethB)
	}
	tp.rules("add", "--queue", fmt.Sprintf("%d-%d", qFirst, qLast), "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	sock := filepath.Join(t.TempDir(), "ps.sock")
	sh := tp.start(tp.B, "packetshaper", shaperBin, "--queue", fmt.Sprintf("%d-%d", qFirst, qLast), "--key", "src",
		"--pps", fmt.Sprint(limRate), "--burst", fmt.Sprint(limBurst), "--control-socket", sock, "--metrics-addr", "127.0.0.1:9464", "--stats-interval", "0")
	for q := qFirst; q <= qLast; q++ {
		tp.waitBound(sh, q)
	}
	seqs := func() (s [qLast - qFirst + 1]uint64) {
		for q := qFirst; q <= qLast; q++ {
			s[q-qFirst] = tp.queue(q).IDSequence
		}
		return s
	}

	// The probes: which queue each (source, destination) pair goes to.
	queuesOf := make([]map[int]bool, srcs)
	used := map[int]bool{}
	probes := 0
	for i, src := range srcIPs {
		queuesOf[i] = map[int]bool{}
		for _, dst := range dstIPs {
			before := seqs()
			tp.send("--src", src, "--dst", dst+":9000", "--flows", "1", "--sport", strconv.Itoa(30000+i),
				"--pps", "0", "--count", "1", "--batch", "1", "--duration", "1s")
			probes++
			// The packet is queued by the time sendto returns (the
			// veth delivers it in the sender's context); wait a little
			// anyway rather than race.
			deadline := time.Now().Add(5 * time.Second)
			var after [qLast - qFirst + 1]uint64
			for {
				after = seqs()
				var n uint64
				for k := range after {
					n += after[k] - before[k]
				}
				if n >= 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			hit := -1
			for k := range after {
				if d := after[k] - before[k]; d == 1 && hit < 0 {
					hit = qFirst + k
				} else if d != 0 {
					t.Fatalf("probe %s > %s: queue counters went from %v to %v, want exactly one packet on one queue", src, dst, before, after)
				}
			}
			if hit < 0 {
				t.Fatalf("probe %s > %s: no queue got the packet (counters %v)", src, dst, after)
			}
			queuesOf[i][hit] = true
			used[hit] = true
		}
	}
	for i, src := range srcIPs {
		qs := sortedInts(queuesOf[i])
		t.Logf("source %s: its %d destinations spread over queues %v", src, dsts, qs)
		if len(qs) < 2 {
			t.Errorf("source %s: all %d destinations on queue %v: the kernel did not spread its packets, the test proves nothing for it", src, dsts, qs)
		}
	}
	if len(used) != qLast-qFirst+1 {
		t.Errorf("queues used: %v, want all of %d-%d", sortedInts(used), qFirst, qLast)
	}
	// The probes took tokens: the buckets fill again (5 at 100/s) long
	// before the traffic starts.
	time.Sleep(200 * time.Millisecond)
	start := seqs()

	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	var dstList []string
	for _, d := range dstIPs {
		dstList = append(dstList, d+":9000")
	}
	var procs []*proc
	for i, src := range srcIPs {
		procs = append(procs, tp.startSend("--src", src, "--dst", strings.Join(dstList, ","), "--flows", "1",
			"--sport", strconv.Itoa(20000+10*i), "--pps", strconv.Itoa(pps), "--duration", dur.String(), "--times"))
	}
	sent := make([]sendResult, srcs)
	var total uint64
	for i, p := range procs {
		sent[i] = sendDone(p)
		total += sent[i].Sent
	}
	r := recvDone(rc, 35*time.Second)
	end := seqs()
	var queued uint64
	for k := range end {
		d := end[k] - start[k]
		queued += d
		t.Logf("queue %d: %d packets of the traffic", qFirst+k, d)
		if d == 0 {
			t.Errorf("queue %d got none of the traffic", qFirst+k)
		}
	}
	if queued != total {
		t.Errorf("sent %d packets, the queues got %d: want every packet queued once", total, queued)
	}

	// Each source: one bucket over all its packets, whichever queue.
	for i, src := range srcIPs {
		port := strconv.Itoa(20000 + 10*i)
		f, ok := sent[i].Flows[port]
		if !ok {
			t.Fatalf("source %s: psend reported no flow %s: %+v", src, port, sent[i])
		}
		want := float64(pps) * dur.Seconds() * dsts
		if got := float64(f.Sent); got < 0.95*want || got > 1.05*want {
			t.Errorf("source %s sent %.0f packets, want %.0f ±5%%: the limit check means nothing otherwise", src, got, want)
		}
		// Each send time is one packet to each destination.
		var times []int64
		for _, us := range f.TimesUs {
			for range dsts {
				times = append(times, us)
			}
		}
		checkWithin(t, "source "+src+" (one bucket over "+strconv.Itoa(len(queuesOf[i]))+" queues)",
			float64(r.Received["9000"][port]), expectTokenBucket(times), 0.05)
	}

	// One listing entry per key, holding every packet of its source.
	listed := tp.flowsListing(tp.B, sock, "--sort", "none")
	out := fmt.Sprintf("%+v", listed)
	byKey := map[string]control.Flow{}
	for _, f := range listed {
		byKey[f.Key] = f
	}
	if len(listed) != srcs || len(byKey) != srcs {
		t.Errorf("packetshaper flows listed %d flows (%d keys), want %d, one per source:\n%s", len(listed), len(byKey), srcs, out)
	}
	for i, src := range srcIPs {
		f, ok := byKey["src "+src]
		switch {
		case !ok:
			t.Errorf("packetshaper flows: no flow %q:\n%s", "src "+src, out)
		case f.Packets != sent[i].Sent+dsts:
			t.Errorf("flow of %s: %d packets, want %d (all it sent, probes included, on whatever queue)", src, f.Packets, sent[i].Sent+dsts)
		}
	}
	// Status: the rule's packets once.
	var st control.Status
	if err := json.Unmarshal([]byte(tp.must(tp.B, shaperBin, "status", "--control-socket", sock, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rules) != 1 || st.Rules[0].Packets != total+uint64(probes) || st.Rules[0].Flows != srcs {
		t.Errorf("status rules %+v: want one rule with %d packets and %d flows", st.Rules, total+uint64(probes), srcs)
	}
	// Metrics: each queue's packets on its own series (the spread, as
	// packetshaper saw it), the rule's and the flows once, on the
	// engine's series labelled with the queues it serves.
	m := tp.scrape(tp.B, "127.0.0.1:9464")
	var perQueue float64
	for q := qFirst; q <= qLast; q++ {
		n := m.get("packetshaper_packets_total", "queue="+strconv.Itoa(q))
		perQueue += n
		if n == 0 {
			t.Errorf("metrics: queue %d decided no packet", q)
		}
		if _, ok := m.lookup("packetshaper_rule_packets_total", "queue="+strconv.Itoa(q)); ok {
			t.Errorf("metrics: a rule series for queue %d alone: the rule's packets must be counted once, on the engine's series", q)
		}
	}
	label := fmt.Sprintf("queue=%d-%d", qFirst, qLast)
	all := float64(total + uint64(probes))
	if perQueue != all {
		t.Errorf("metrics: the queues decided %.0f packets, want %.0f", perQueue, all)
	}
	m.expect("rule packets", all, "packetshaper_rule_packets_total", label, "rule=default")
	m.expect("flows", srcs, "packetshaper_flows", label)

	acc, drop, line := finalStats(t, tp.stopShaper(sh))
	t.Logf("final stats: %s", line)
	if acc+drop != total+uint64(probes) {
		t.Errorf("accepted %d + dropped %d, want the %d packets sent, each decided once", acc, drop, total+uint64(probes))
	}
}

func sortedInts(m map[int]bool) []int {
	var s []int
	for k := range m {
		s = append(s, k)
	}
	sort.Ints(s)
	return s
}
