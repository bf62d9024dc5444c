package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTwoQueues: with --queue 0-1 and a --queue-balance 0:1 rule, both
// queues get packets, every flow stays on one queue so its limit still
// holds, and every packet is decided once.
//
// The kernel balances by a hash of the IP addresses and protocol only (not
// the ports: see nfqueue_hash in include/net/netfilter/nf_queue.h), so all
// flows between two addresses share one queue. The test therefore sends
// from 20 source addresses: the chance that they all hash to the same queue
// is 2/2^20.
func TestTwoQueues(t *testing.T) {
	// Serial: 20 senders (10 000 packets/s) whose flows are checked
	// against an ideal bucket over their send times, which a shaper
	// starved beside other tests sees bunched (stress-tests.sh --e2e 1:
	// 270 of 301).
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "0-1", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	sh := tp.startShaper("--queue", "0-1", "--pps", fmt.Sprint(limRate), "--burst", fmt.Sprint(limBurst))
	tp.waitBound(sh, 1)
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")

	const senders = 20
	dev := strings.Fields(tp.must(tp.A, "ip", "-o", "link", "show", "type", "veth"))[1]
	dev = strings.TrimSuffix(strings.Split(dev, "@")[0], ":")
	var procs []*proc
	for i := range senders {
		src := fmt.Sprintf("10.213.0.%d", 100+i)
		tp.must(tp.A, "ip", "addr", "add", src+"/24", "dev", dev)
		procs = append(procs, tp.start(tp.A, "psend send "+src, psendBin, "send", "--src", src, "--dst", tp.IPB+":9000",
			"--flows", "2", "--sport", fmt.Sprint(20000+10*i), "--pps", "250", "--duration", "3s", "--times"))
	}
	sent := map[string]sendResult{}
	var total uint64
	for _, p := range procs {
		if err := p.wait(30 * time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", p.name, err, indent(p.err.String()))
		}
		var s sendResult
		p.decode(&s)
		total += s.Sent
		for port := range s.Flows {
			sent[port] = s
		}
	}
	r := recvDone(rc, 35*time.Second)
	q0, q1 := tp.queue(0), tp.queue(1)
	acc, drop, line := finalStats(t, tp.stopShaper(sh))
	t.Logf("final stats: %s", line)
	t.Logf("queue 0 saw %d packets, queue 1 saw %d", q0.IDSequence, q1.IDSequence)
	if q0.IDSequence == 0 || q1.IDSequence == 0 {
		t.Errorf("a queue got no packets (queue 0: %d, queue 1: %d): %d source addresses should spread over both", q0.IDSequence, q1.IDSequence, senders)
	}
	if q0.IDSequence+q1.IDSequence != total || acc+drop != total || acc != r.Total {
		t.Errorf("sent %d, queued %d+%d, accepted %d + dropped %d, received %d: want every packet queued and decided once",
			total, q0.IDSequence, q1.IDSequence, acc, drop, r.Total)
	}
	if len(sent) != 2*senders {
		t.Fatalf("%d flows reported by the senders, want %d", len(sent), 2*senders)
	}
	for _, port := range sortedPorts(sent) {
		f := sent[port].Flows[port]
		checkWithin(t, "flow "+port, float64(r.Received["9000"][port]), expectTokenBucket(f.TimesUs), 0.10)
	}
}

// TestStartupErrors: a queue bound by another process, no privileges and
// bad flags each give one clear line on stderr and a non-zero exit, without
// a panic.
func TestStartupErrors(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	first := tp.startShaper("--queue", "0", "--pps", "10")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"queue already bound", []string{shaperBin, "--queue", "0", "--pps", "10"}, "already bound"},
		{"not root", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", shaperBin, "--queue", "1", "--pps", "10"}, "root"},
		{"no limit", []string{shaperBin, "--queue", "1"}, "--pps"},
		{"bad queue", []string{shaperBin, "--queue", "5-2", "--pps", "10"}, "--queue"},
		{"bad algorithm", []string{shaperBin, "--queue", "1", "--pps", "10", "--algo", "leaky"}, "--algo"},
	} {
		p := tp.start(tp.B, "packetshaper ("+c.name+")", c.args...)
		err := p.wait(10 * time.Second)
		stderr := strings.TrimSpace(p.err.String())
		switch {
		case err == nil:
			t.Errorf("%s: exit status 0, want an error", c.name)
		case strings.Contains(stderr, "\n") || stderr == "":
			t.Errorf("%s: want exactly one line on stderr, got:\n%s", c.name, indent(stderr))
		case strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine"):
			t.Errorf("%s: panicked:\n%s", c.name, indent(stderr))
		case !strings.Contains(stderr, c.want):
			t.Errorf("%s: stderr %q does not mention %q", c.name, stderr, c.want)
		default:
			t.Logf("%s: %v: %s", c.name, err, stderr)
		}
	}
	if first.exited() {
		t.Errorf("the first packetshaper exited: %v", first.waitErr)
	}
	tp.stopShaper(first)
}
