package nfq

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/netnstest"
)

// ctRun sends a UDP request to TestPort, waits for it, answers it from the
// receiver, and sends a second request: the states the handler saw, in
// order ("has=true info=2").
func ctRun(t *testing.T, queue uint16, c Config) (q *Queue, seen []string) {
	t.Helper()
	netnstest.UnshareQueue(t, queue)
	// A conntrack match anywhere turns connection tracking on in the
	// namespace, as the divert rules' match does.
	netnstest.Run(t, "", "iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", "INVALID", "-j", "ACCEPT")
	p := netnstest.NewUDPPair(t)
	c.Queue, c.Conntrack = queue, true
	q = openQueue(t, c)
	var mu sync.Mutex
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, pk := range batch {
			seen = append(seen, fmt.Sprintf("has=%v info=%d", pk.HasCt, pk.CtInfo))
		}
	})
	p.Send(t, 1, 8)
	if got := p.WaitCount(1, 5*time.Second); got != 1 {
		t.Fatalf("%d of 1 datagrams arrived", got)
	}
	// The reply: from TestPort to the sender's port (not queued).
	if _, err := p.Rx.WriteToUDP([]byte("re"), p.Tx.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	p.Tx.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := p.Tx.Read(make([]byte, 16)); err != nil {
		t.Fatalf("reply: %v", err)
	}
	p.Send(t, 2, 8)
	if got := p.WaitCount(2, 5*time.Second); got != 2 {
		t.Fatalf("%d of 2 datagrams arrived", got)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	return q, seen
}

// TestConntrackLive: the kernel sends each packet's connection state once
// the queue asks for it: a UDP conversation's first packet is new, the one
// after the reply established.
func TestConntrackLive(t *testing.T) {
	var logs []string
	q, seen := ctRun(t, 13, Config{Logf: func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }})
	if !q.Conntrack() {
		t.Skipf("skipped: this kernel does not send connection states to NFQUEUE (%q): CONFIG_NETFILTER_NETLINK_GLUE_CT is off", logs)
	}
	if want := []string{fmt.Sprintf("has=true info=%d", CtNew), fmt.Sprintf("has=true info=%d", CtEstablished)}; strings.Join(seen, ";") != strings.Join(want, ";") {
		t.Errorf("states seen %q, want %q", seen, want)
	}
}

// TestConntrackRefused: a kernel that refuses the conntrack flag (here a
// flag past NFQA_CFG_F_MAX, as a kernel without ctnetlink refuses
// NFQA_CFG_F_CONNTRACK) still gets a bound queue, with owners, without
// states, and Logf says so once.
func TestConntrackRefused(t *testing.T) {
	setFlag(t, &conntrackFlag, 1<<5)
	logf, logged := logLines()
	q, seen := ctRun(t, 14, Config{Logf: logf})
	if q.Conntrack() || !q.Owners() {
		t.Errorf("Conntrack() = %v, Owners() = %v after the kernel refused the conntrack flag", q.Conntrack(), q.Owners())
	}
	if strings.Join(seen, ";") != "has=false info=0;has=false info=0" {
		t.Errorf("states seen %q, want none", seen)
	}
	if logs := logged(); len(logs) != 1 || !strings.Contains(logs[0], "does not send packets' connection state") {
		t.Errorf("logged %q, want one line saying states are off", logs)
	}
}
