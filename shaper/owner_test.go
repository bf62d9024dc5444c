package shaper

import (
	"fmt"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
)

// TestEngineOwnerKeys: a rule keyed by uid gives each user one bucket
// whatever addresses and ports the user sends from and to; packets without
// an owner (forwarded, incoming, replay: no Meta or HasOwner false) share
// one more bucket, "no owner", rather than passing unlimited.
func TestEngineOwnerKeys(t *testing.T) {
	for _, mode := range []string{"uid", "gid"} {
		m, err := flows.ParseMode(mode)
		if err != nil {
			t.Fatal(err)
		}
		e := mustNew(t, Config{Rate: 1, Burst: 3, Key: flows.KeyConfig{Mode: m}})
		accepted := map[string]int{}
		var d Decision
		for i := range 40 {
			// Each packet a new 5-tuple: only the owner keys it.
			pkt := udp(i, uint16(1000+i), 10)
			for _, meta := range []*Meta{
				{UID: 1001, GID: 101, HasOwner: true},
				{UID: 1002, GID: 102, HasOwner: true},
				{UID: 1001, GID: 101}, // owner not known
				nil,                   // no meta at all
			} {
				e.DecidePacket(pkt, meta, t0, &d)
				if d.Verdict == Accept {
					accepted[e.FlowName(0, d.Key)]++
				}
			}
		}
		want := map[string]int{mode + " 1001": 3, mode + " 1002": 3, "no owner": 3}
		if mode == "gid" {
			want = map[string]int{"gid 101": 3, "gid 102": 3, "no owner": 3}
		}
		if fmt.Sprint(accepted) != fmt.Sprint(want) {
			t.Errorf("key %s: accepted %v, want %v (burst 3 each)", mode, accepted, want)
		}
		if s := e.Stats(); s.Flows != 3 {
			t.Errorf("key %s: %d flows, want 3", mode, s.Flows)
		}
	}
}

// TestEngineMarkKey: key = "mark" with a mask keys by the masked mark.
func TestEngineMarkKey(t *testing.T) {
	e := mustNew(t, Config{Rate: 1, Burst: 2, Key: flows.KeyConfig{Mode: flows.ByMark | flows.NoAddr, MarkMask: 0xff00}})
	var d Decision
	acc := map[string]int{}
	for i := range 10 {
		for _, mark := range []uint32{0x100, 0x1ff, 0x200, 0} {
			e.DecidePacket(udp(i, 1, 10), &Meta{Mark: mark}, t0, &d)
			if d.Verdict == Accept {
				acc[e.FlowName(0, d.Key)]++
			}
		}
	}
	if want := "map[mark 0x0:2 mark 0x100:2 mark 0x200:2]"; fmt.Sprint(acc) != want {
		t.Errorf("accepted %v, want %s", acc, want)
	}
}

// TestDecideOwnerNoAlloc: owner keys keep DecidePacket allocation-free.
func TestDecideOwnerNoAlloc(t *testing.T) {
	for _, mode := range []string{"uid", "gid+dst", "mark+src"} {
		m, _ := flows.ParseMode(mode)
		e := mustNew(t, Config{Rate: 1e6, Burst: 100, Key: flows.KeyConfig{Mode: m}})
		pkt := udp(1, 1, 10)
		meta := &Meta{UID: 1001, GID: 100, Mark: 7, HasOwner: true}
		var d Decision
		now := t0
		e.DecidePacket(pkt, meta, now, &d)
		if n := testing.AllocsPerRun(1000, func() {
			now += 1000
			meta.UID = uint32(now>>10) & 7
			e.DecidePacket(pkt, meta, now, &d)
		}); n != 0 {
			t.Errorf("key %s: %v allocations per packet", mode, n)
		}
	}
}

// BenchmarkDecideOwner is BenchmarkDecide's engine keyed by uid, 1 and
// 10 000 users.
//
//	go test -run ^$ -bench DecideOwner -benchmem ./shaper
func BenchmarkDecideOwner(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		pkts := make([][]byte, n)
		metas := make([]Meta, n)
		for i := range pkts {
			pkts[i] = udp(i, uint16(i), 36)
			metas[i] = Meta{UID: uint32(1000 + i), GID: 100, HasOwner: true}
		}
		b.Run(fmt.Sprintf("uid/flows=%d", n), func(b *testing.B) {
			e := mustNew(b, Config{Rate: 1e6, Burst: 100, MaxFlows: n, Key: flows.KeyConfig{Mode: flows.ByUID | flows.NoAddr}})
			now := t0
			var d Decision
			for i, p := range pkts {
				e.DecidePacket(p, &metas[i], now, &d)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				now += 100
				e.DecidePacket(pkts[i], &metas[i], now, &d)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}
