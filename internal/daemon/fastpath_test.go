package daemon

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestPuntMarkCleared: with the fast path, a packet reaches the queue with
// the punt mark or'ed into its mark; the engine must see the mark the
// packet had before, so that a mark match decides as the kernel's does.
func TestPuntMarkCleared(t *testing.T) {
	w := newTestWorker(t, rule("unmarked", `mark = "0x0/0xffffffff"`, `action = "drop"`))
	w.punt = fastpath.DefaultPuntMark
	d := udp4(1000)
	batch := []nfq.Packet{{ID: 1, Data: d, Len: len(d), Mark: fastpath.DefaultPuntMark}, {ID: 2, Data: d, Len: len(d), Mark: fastpath.DefaultPuntMark | 1}}
	v := make([]nfq.Verdict, 2)
	w.decide(batch, v, 1e18)
	if v[0].Action != nfq.Drop || v[1].Action == nfq.Drop {
		t.Errorf("verdicts %v, %v: want the punted unmarked packet dropped (mark 0 once the punt bit is cleared), the marked one accepted", v[0].Action, v[1].Action)
	}
}

// TestPuntMarkClearedInVerdict: a packet user space accepts leaves with
// the punt bit cleared from its mark (NFQA_MARK in the verdict), its other
// bits kept; a rule's set mark is computed without it; a packet without the
// bit, and one dropped, get no mark in their verdict; all of it without
// allocating.
func TestPuntMarkClearedInVerdict(t *testing.T) {
	w := newTestWorker(t, rule("drop", udpSport(1000), `action = "drop"`)+
		rule("set", udpSport(1001), "pps = 0.001", "burst = 1", `on-exceed = "mark"`, `set-mark = "0x10/0x10"`))
	const punt = fastpath.DefaultPuntMark
	w.punt = punt
	a, b, c := udp4(1000), udp4(1001), udp4(2000)
	batch := []nfq.Packet{
		{ID: 1, Data: c, Len: len(c), Mark: punt},       // accepted, no rule
		{ID: 2, Data: c, Len: len(c), Mark: punt | 0x5}, // accepted, other bits kept
		{ID: 3, Data: c, Len: len(c), Mark: 0x5},        // not punted: untouched
		{ID: 4, Data: a, Len: len(a), Mark: punt},       // dropped
		{ID: 5, Data: b, Len: len(b), Mark: punt | 0x1}, // within the limit
		{ID: 6, Data: b, Len: len(b), Mark: punt | 0x1}, // over it: marked
	}
	v := make([]nfq.Verdict, len(batch))
	w.decide(batch, v, 1e18)
	want := []nfq.Verdict{
		{Action: nfq.Accept, SetMark: true, Mark: 0},
		{Action: nfq.Accept, SetMark: true, Mark: 0x5},
		{Action: nfq.Accept},
		{Action: nfq.Drop},
		{Action: nfq.Accept, SetMark: true, Mark: 0x1},
		{Action: nfq.Accept, SetMark: true, Mark: 0x11},
	}
	for i := range want {
		if v[i] != want[i] {
			t.Errorf("packet %d (mark %#x): verdict %+v, want %+v", batch[i].ID, batch[i].Mark, v[i], want[i])
		}
	}
	now := int64(1e18)
	if n := decideAllocs(100, w, batch, v, &now, 1e6); n != 0 {
		t.Errorf("decide with punted packets: %v allocations, want 0", n)
	}
}

// TestAddFast: the kernel's counts of a rule are added to the engine's in
// a snapshot, by rule name, its flows and evictions to the snapshot's too,
// and a rule the kernel runs is labelled path kernel; other rules are left
// alone (path queue).
func TestAddFast(t *testing.T) {
	var fc atomic.Pointer[fastCounts]
	s := &snapshot{Stats: shaper.Stats{Flows: 3}, rules: []ruleSnap{{name: "k", RuleStats: shaper.RuleStats{Packets: 1, Accepted: 1}}, {name: "u", RuleStats: shaper.RuleStats{Packets: 2, Flows: 3}}}}
	addFast(&fc, s) // no fast path: nothing
	fc.Store(&fastCounts{get: func(name string) (fastRule, bool) {
		return fastRule{RuleStats: shaper.RuleStats{Packets: 10, Accepted: 4, Dropped: 6, ShadowDropped: 1, Marked: 2, Flows: 7, Evictions: 5}, kernel: true}, name == "k"
	}})
	addFast(&fc, s)
	if k := s.rules[0].RuleStats; k.Packets != 11 || k.Accepted != 5 || k.Dropped != 6 || k.ShadowDropped != 1 || k.Marked != 2 || k.Flows != 7 || k.Evictions != 5 {
		t.Errorf("kernel rule %+v", k)
	}
	if u := s.rules[1].RuleStats; u.Packets != 2 || u.Accepted != 0 || u.Flows != 3 {
		t.Errorf("user-space rule %+v", u)
	}
	if p, q := s.rules[0].pathLabel(), s.rules[1].pathLabel(); p != pathKernel || q != pathQueue {
		t.Errorf("paths %q, %q; want kernel, queue", p, q)
	}
	if s.Flows != 10 || s.Evictions != 5 {
		t.Errorf("snapshot flows %d evictions %d, want 10, 5", s.Flows, s.Evictions)
	}
}

// TestFastpathRuleHints: with --fastpath, a missing punt-mark divert rule,
// and a queue rule elsewhere that would queue the kernel's packets again,
// are each one warning; the one rules.sh --fastpath writes is none.
func TestFastpathRuleHints(t *testing.T) {
	punt := failopen.QueueRule{Family: "ip", Table: "mangle", Chain: "PREROUTING", Queue: 0, Queues: 1, Bypass: true}
	input := failopen.QueueRule{Family: "ip", Table: "filter", Chain: "INPUT", Queue: 0, Queues: 2, Bypass: true}
	otherQ := failopen.QueueRule{Family: "ip", Table: "filter", Chain: "INPUT", Queue: 5, Queues: 1}
	for _, tc := range []struct {
		rules []failopen.QueueRule
		want  []string
	}{
		{[]failopen.QueueRule{punt, otherQ}, nil},
		{nil, []string{"no queue rule in mangle PREROUTING"}},
		{[]failopen.QueueRule{otherQ}, []string{"no queue rule in mangle PREROUTING"}},
		{[]failopen.QueueRule{punt, input}, []string{"ip filter INPUT"}},
	} {
		got := fastpathRuleHints(tc.rules, []uint16{0})
		if len(got) != len(tc.want) {
			t.Errorf("%v: %q, want %d warnings", tc.rules, got, len(tc.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tc.want[i]) {
				t.Errorf("%q lacks %q", got[i], tc.want[i])
			}
		}
	}
}

// TestAddFastTotals: the kernel's counts of a total are added to the
// engine's of the same name in a snapshot; other totals are left alone.
func TestAddFastTotals(t *testing.T) {
	var fc atomic.Pointer[fastCounts]
	s := &snapshot{totals: []totalSnap{
		{total: shaper.Total{Name: "k"}, TotalStats: shaper.TotalStats{Packets: 1, Accepted: 1}},
		{total: shaper.Total{Name: "u"}, TotalStats: shaper.TotalStats{Packets: 2, Dropped: 2}},
	}}
	fc.Store(&fastCounts{get: func(string) (fastRule, bool) { return fastRule{}, false }, total: func(name string) (shaper.TotalStats, bool) {
		return shaper.TotalStats{Packets: 10, Accepted: 4, Dropped: 6}, name == "k"
	}})
	addFast(&fc, s)
	if k := s.totals[0].TotalStats; k != (shaper.TotalStats{Packets: 11, Accepted: 5, Dropped: 6}) {
		t.Errorf("kernel total %+v, want 11 packets, 5 accepted, 6 dropped", k)
	}
	if u := s.totals[1].TotalStats; u != (shaper.TotalStats{Packets: 2, Dropped: 2}) {
		t.Errorf("user-space total %+v", u)
	}
}
