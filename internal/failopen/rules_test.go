package failopen

import (
	"encoding/binary"
	"testing"
)

func xtInfo(fields ...uint16) []byte {
	b := make([]byte, 8) // the kernel pads target info to 8 bytes
	for i, f := range fields {
		binary.NativeEndian.PutUint16(b[2*i:], f)
	}
	return b
}

func TestDecodeXtNFQ(t *testing.T) {
	for i, tc := range []struct {
		rev  uint32
		info []byte
		want QueueRule
	}{
		{0, xtInfo(7), QueueRule{Queue: 7, Queues: 1}},
		{1, xtInfo(3, 4), QueueRule{Queue: 3, Queues: 4}},
		{1, xtInfo(3, 0), QueueRule{Queue: 3, Queues: 1}}, // total 0 means one queue
		{2, xtInfo(9, 1, 1), QueueRule{Queue: 9, Queues: 1, Bypass: true}},
		{2, xtInfo(9, 1, 0), QueueRule{Queue: 9, Queues: 1}},
		{3, xtInfo(0, 2, xtNFQFlagBypass), QueueRule{Queue: 0, Queues: 2, Bypass: true}},
		{3, xtInfo(0, 2, xtNFQFlagCPUFanout), QueueRule{Queue: 0, Queues: 2, Fanout: true}},
		{3, xtInfo(65535, 1, xtNFQFlagBypass|xtNFQFlagCPUFanout), QueueRule{Queue: 65535, Queues: 1, Bypass: true, Fanout: true}},
		{3, xtInfo(1)[:4], QueueRule{Computed: true}}, // short
		{0, nil, QueueRule{Computed: true}},
		{4, xtInfo(1, 1, 1), QueueRule{Computed: true}}, // unknown revision
	} {
		var got QueueRule
		decodeXtNFQ(tc.rev, tc.info, &got)
		if got != tc.want {
			t.Errorf("step %d: decodeXtNFQ(rev %d, % x) = %+v, want %+v", i, tc.rev, tc.info, got, tc.want)
		}
	}
}

func TestQueueRuleCovers(t *testing.T) {
	r := QueueRule{Queue: 3, Queues: 3}
	for q, want := range map[uint16]bool{2: false, 3: true, 5: true, 6: false} {
		if r.Covers(q) != want {
			t.Errorf("%+v.Covers(%d) = %v", r, q, !want)
		}
	}
	if (QueueRule{Queue: 65535, Queues: 1}).Covers(0) {
		t.Error("queue 65535 covers 0")
	}
	if (QueueRule{Computed: true, Queues: 1}).Covers(0) {
		t.Error("a computed queue covers 0")
	}
}

func TestUnservedQueues(t *testing.T) {
	single := QueueRule{Family: "ip", Table: "filter", Chain: "INPUT", Handle: 7, Queue: 3, Queues: 1, Bypass: true}
	balance := QueueRule{Family: "ip6", Table: "mangle", Chain: "FORWARD", Handle: 2, Queue: 0, Queues: 8}
	computed := QueueRule{Family: "inet", Table: "t", Chain: "c", Handle: 1, Computed: true}
	got := UnservedQueues([]QueueRule{single, balance, computed}, []uint16{0, 1, 5})
	want := []string{
		"rule ip filter INPUT handle 7 sends to queue 3, which nobody serves: its packets pass unlimited (bypass)",
		"rule ip6 mangle FORWARD handle 2 sends to queues 2-4,6-7, which nobody serves: the packets it balances to them are dropped (no bypass)",
	}
	if len(got) != len(want) {
		t.Fatalf("UnservedQueues = %v, want %d entries", got, len(want))
	}
	for i := range want {
		if s := got[i].String(); s != want[i] {
			t.Errorf("entry %d: %q, want %q", i, s, want[i])
		}
	}
	if got := UnservedQueues([]QueueRule{single}, []uint16{3}); len(got) != 0 {
		t.Errorf("served queue reported: %v", got)
	}
	all := QueueRule{Queue: 65534, Queues: 2}
	if got := UnservedQueues([]QueueRule{all}, nil); len(got) != 1 || queueList(got[0].Queues) != "65534-65535" {
		t.Errorf("queues at the top of the range: %v", got)
	}
}
