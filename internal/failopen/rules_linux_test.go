package failopen

import (
	"github.com/packetshaper/packetshaper/internal/netnstest"

	"github.com/packetshaper/packetshaper/nfq"

	"fmt"
	"github.com/google/nftables/expr"
	"slices"
	"testing"
	"time"
)

// TestQueueRules lists real iptables-nft and ip6tables-nft rules in a
// fresh namespace: single queue with bypass (from newNetns), a balance
// range without bypass, CPU fanout, IPv6; other rules are left out; the
// counters count the packets queued.
func TestQueueRules(t *testing.T) {
	const queue = 1
	netnstest.UnshareQueue(t, queue)
	netnstest.Run(t, "", "iptables", "-A", "OUTPUT", "-p", "udp", "--dport", "9001", "-j", "NFQUEUE", "--queue-balance", "3:5")
	netnstest.Run(t, "", "iptables", "-A", "INPUT", "-p", "tcp", "-j", "NFQUEUE", "--queue-balance", "10:11", "--queue-cpu-fanout", "--queue-bypass")
	netnstest.Run(t, "", "iptables", "-t", "mangle", "-A", "PREROUTING", "-p", "udp", "-j", "ACCEPT")
	netnstest.Run(t, "", "ip6tables", "-A", "OUTPUT", "-p", "udp", "-j", "NFQUEUE", "--queue-num", "20")
	netnstest.Run(t, "", "iptables", "-A", "OUTPUT", "-p", "udp", "--dport", "9002", "-j", "NFQUEUE") // revision 0: queue 0
	rules, err := QueueRules()
	if err != nil {
		t.Fatal(err)
	}
	type plain QueueRule // no String method: %+v shows the fields
	for _, r := range rules {
		t.Logf("%+v", plain(r))
	}
	type want struct {
		family, chain         string
		queue, queues         uint16
		bypass, fanout, count bool
	}
	var got []want
	for _, r := range rules {
		if !r.Xt || r.Table != "filter" || r.Computed || r.Handle == 0 {
			t.Errorf("%s: %+v: want an xt rule of table filter with a handle", r, r)
		}
		got = append(got, want{r.Family, r.Chain, r.Queue, r.Queues, r.Bypass, r.Fanout, r.HasCounter})
	}
	wantRules := []want{
		{"ip", "OUTPUT", 0, 1, false, false, true},
		{"ip", "OUTPUT", 1, 1, true, false, true},
		{"ip", "OUTPUT", 3, 3, false, false, true},
		{"ip", "INPUT", 10, 2, true, true, true},
		{"ip6", "OUTPUT", 20, 1, false, false, true},
	}
	if !slices.Equal(got, wantRules) {
		t.Errorf("QueueRules:\n got %v\nwant %v", got, wantRules)
	}

	// Counters: 5 packets to queue 1 (nobody bound: bypass accepts them).
	p := netnstest.NewUDPPair(t)
	for i := 0; i < 5; i++ {
		p.Send(t, uint16(i), 8)
	}
	p.WaitCount(5, time.Second)
	rules, err = QueueRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		want := uint64(0)
		if r.Queue == queue {
			want = 5
		}
		if r.Packets != want {
			t.Errorf("%s (queue %d): Packets = %d, want %d", r, r.Queue, r.Packets, want)
		}
	}

	// Hints: with queue 1 bound, every other queue is unserved.
	openQueue(t, nfq.Config{Queue: queue})
	bound, err := nfq.BoundQueues()
	if err != nil || !slices.Equal(bound, []uint16{queue}) {
		t.Fatalf("nfq.BoundQueues = %v, %v; want [%d]", bound, err, queue)
	}
	var hints []string
	for _, u := range UnservedQueues(rules, bound) {
		hints = append(hints, u.String())
	}
	if len(hints) != 4 {
		t.Errorf("hints: %q, want 4 (queues 0, 3-5, 10-11, 20)", hints)
	}
	for _, h := range hints {
		t.Log(h)
	}
	if len(hints) > 1 && hints[1] != fmt.Sprintf("rule %s sends to queues 3-5, which nobody serves: its packets are dropped (no bypass)", rules[2]) {
		t.Errorf("hint %q", hints[1])
	}
}

// TestQueueRuleCounterPlace: only a counter right before the queue
// statement counts the packets the rule queues; one with a match between
// counts packets the match turns away (found by review: it inflated the
// "exact" fail-open count).
func TestQueueRuleCounterPlace(t *testing.T) {
	q := &expr.Queue{Num: 3, Total: 1}
	c := &expr.Counter{Packets: 42}
	m := &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6}}
	for _, tc := range []struct {
		name  string
		exprs []expr.Any
		has   bool
	}{
		{"match counter queue", []expr.Any{m, c, q}, true},
		{"counter match queue", []expr.Any{c, m, q}, false},
		{"no counter", []expr.Any{m, q}, false},
	} {
		r, ok := queueRule(tc.exprs)
		if !ok || r.HasCounter != tc.has || (tc.has && r.Packets != 42) || r.Queue != 3 {
			t.Errorf("%s: %+v, %v; want HasCounter %v", tc.name, r, ok, tc.has)
		}
	}
}
