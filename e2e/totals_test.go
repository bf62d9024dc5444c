package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// sentPkt is one packet psend sent: its time (ns) and its source's index.
type sentPkt struct {
	ns  int64
	src int
}

// TestTotalPolicing is issue 32's policing bar: eight UDP sources (one
// address each) send 200 packets/s each for 4 s through a rule of 100
// packets/s per source (burst 5) that charges a total of 400 packets/s
// (burst 20). What arrives in all must be at most 400 × T + 20 (+2 %), T
// the time the senders sent over, and no source may get more than its own
// 100 × T + 5 (+2 %); the total must also be what an ideal two-level
// bucket lets through of the packets at their send times (±5 %), so that
// a shaper passing far less fails too. status --json must count the
// total's packets as the receiver saw them.
func TestTotalPolicing(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	const (
		srcs                 = 8
		pps                  = 200
		dur                  = 4 * time.Second
		keyRate, keyBurst    = 100, 5
		totalRate, totalBurs = 400, 20
	)
	var srcIPs []string
	for i := range srcs {
		srcIPs = append(srcIPs, fmt.Sprintf("10.213.0.%d", 100+i))
		tp.must(tp.A, "ip", "addr", "add", srcIPs[i]+"/24", "dev", tp.VethA)
	}
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	writePolicy(t, pol, fmt.Sprintf(`
[[total]]
name  = "guests"
pps   = %d
burst = %d

[[rule]]
name  = "per-guest"
match = { proto = ["udp"], dport = ["9000"] }
key   = "src"
pps   = %d
burst = %d
total = "guests"
`, totalRate, totalBurs, keyRate, keyBurst))
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	sock := filepath.Join(dir, "ps.sock")
	sh := tp.startShaper("--queue", "0", "--policy", pol, "--control-socket", sock, "--stats-interval", "0")

	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	var procs []*proc
	for i, src := range srcIPs {
		procs = append(procs, tp.startSend("--src", src, "--dst", tp.IPB+":9000", "--flows", "1",
			"--sport", strconv.Itoa(21000+i), "--pps", strconv.Itoa(pps), "--duration", dur.String(), "--times", "--align", "1s"))
	}
	sent := make([]sendResult, srcs)
	for i, p := range procs {
		sent[i] = sendDone(p)
	}
	r := recvDone(rc, 35*time.Second)

	// The packets at their send times, every source's, in order.
	var all []sentPkt
	first, last := int64(1<<62), int64(0)
	for i := range srcIPs {
		f, ok := sent[i].Flows[strconv.Itoa(21000+i)]
		if !ok {
			t.Fatalf("source %s: psend reported no flow: %+v", srcIPs[i], sent[i])
		}
		if want := float64(pps) * dur.Seconds(); float64(f.Sent) < 0.95*want {
			t.Errorf("source %s sent %d packets, want %.0f −5 %%: the limits would not be tested", srcIPs[i], f.Sent, want)
		}
		for _, us := range f.TimesUs {
			all = append(all, sentPkt{f.FirstNs + us*1000, i})
		}
		first, last = min(first, f.FirstNs), max(last, f.LastNs)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].ns < all[b].ns })
	total := bucket{rate: totalRate, burst: totalBurs}
	keys := make([]bucket, srcs)
	for i := range keys {
		keys[i] = bucket{rate: keyRate, burst: keyBurst}
	}
	ideal := 0.0
	for _, p := range all {
		// Check on copies, keep them only when both pass: a packet
		// the total refuses costs its source nothing.
		k, tb := keys[p.src], total
		if k.allow(p.ns) && tb.allow(p.ns) {
			keys[p.src], total = k, tb
			ideal++
		}
	}

	T := float64(last-first) / 1e9
	var got uint64
	for i := range srcIPs {
		n := r.Received["9000"][strconv.Itoa(21000+i)]
		got += n
		if bound := (keyRate*T + keyBurst) * 1.02; float64(n) > bound {
			t.Errorf("source %s: %d packets arrived, over its own limit 100 × %.2f s + 5 (+2 %%) = %.0f", srcIPs[i], n, T, bound)
		}
	}
	bound := (totalRate*T + totalBurs) * 1.02
	if float64(got) > bound {
		t.Errorf("%d packets arrived in all, over the total 400 × %.2f s + 20 (+2 %%) = %.0f", got, T, bound)
	} else {
		t.Logf("%d packets arrived in all over %.2f s (bound %.0f; each source's %.0f)", got, T, bound, (keyRate*T+keyBurst)*1.02)
	}
	checkWithin(t, "all sources (an ideal two-level bucket over the send times)", float64(got), ideal, 0.05)

	// status --json: the total's counters are what arrived (its rule's
	// packets all met it; the snapshot may lag by 100 ms).
	var tot control.Total
	testutil.WaitFor(t, 5*time.Second, func() bool {
		out := tp.must(tp.B, shaperBin, "status", "--control-socket", sock, "--json")
		var st control.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if len(st.Totals) != 1 {
			t.Fatalf("status --json lists totals %+v, want guests only", st.Totals)
		}
		tot = st.Totals[0]
		return tot.Packets == uint64(len(all))
	})
	if tot.Name != "guests" || tot.Packets != uint64(len(all)) || tot.Accepted != got || tot.Accepted+tot.Dropped > tot.Packets {
		t.Errorf("status total %+v: want guests, %d packets (sent), %d accepted (arrived)", tot, len(all), got)
	}
	tp.stopShaper(sh)
}
