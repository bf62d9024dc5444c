//go:build linux

package fastpath

import (
	"encoding/binary"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestFlood is the user-space path's flood test (cmd/packetshaper's
// TestReplayUnderAttack: a million packets, each from a new source, beside
// legitimate flows, against a flow table far smaller than the flood)
// against the kernel's LRU map: 1 000 000 spoofed sources, each sending one
// packet, at 100 000 packets/s, 61× the map, against a src-keyed limit.
// Each legitimate source must get what an exact token bucket over its own
// packets gives (±5 %): the LRU map keeps their state under the flood, it
// does not start them afresh with a full bucket. The flood must have
// evicted (inserts > flows present), and every packet agrees with the Go
// engine, whose flow table is under the same flood.
//
// One BPF_PROG_TEST_RUN and one config update per packet, from one frame
// whose source address is changed in place: about 2 × 1 M system calls
// (measured: 11 s; 50 s under -race, where it is skipped: raceEnabled).
func TestFlood(t *testing.T) {
	const offered = 200 // per legitimate source, packets/s
	gap := int64(time.Second) / offered
	runFlood(t, 100, 10, 0.05, true, func(j int, start, end int64) []int64 {
		var ts []int64
		for at := start + int64(j)*gap/8 + 1000; at < end; at += gap {
			ts = append(ts, at)
		}
		return ts
	})
}

// TestFloodPausingFlows is issue 26's churn row in the kernel: legitimate
// sources that pause between bursts (key src, 1/s burst 10; a burst of 10
// every second) beside the million spoofed one-packet sources. In one LRU
// map the flood evicted a pausing flow between its bursts, and it came back
// with a full bucket (1.9-4.2x its ideal); with the map of new flows the
// flood's one-packet flows never reach the map of flows, and each source
// gets what one bucket over its own packets gives (within 10 %).
func TestFloodPausingFlows(t *testing.T) {
	// The Go engine is not asked to agree packet for packet: its S3-FIFO
	// table gave one source a fresh bucket once (9 packets of 1 000 800
	// differ, all the engine's extra accepts).
	runFlood(t, 1, 10, 0.10, false, func(j int, start, end int64) []int64 {
		var ts []int64
		for at := start + int64(j)*int64(time.Millisecond)*37 + 1000; at < end; at += int64(time.Second) {
			for k := range 10 {
				ts = append(ts, at+int64(k)*int64(time.Millisecond))
			}
		}
		return ts
	})
}

// runFlood sends 1 000 000 spoofed one-packet sources over 10 s beside 8
// legitimate sources (their packet times from legitTimes) through a
// src-keyed limit rule of rate/s burst burst, and checks each legitimate
// source against an exact token bucket over its own packets (within tol),
// the flood's passage through the map, and (if agree) every packet against
// the Go engine.
func runFlood(t *testing.T, rate, burst int64, tol float64, wantAgree bool, legitTimes func(j int, start, end int64) []int64) {
	if raceEnabled {
		t.Skip("a million packets in one goroutine: 50 s under -race for nothing more checked; the unit stage runs it without -race")
	}
	const (
		maxFlows = 16384
		legit    = 8
		seconds  = 10
		flood    = 1_000_000 // spoofed packets, each from its own source
	)
	f := &policy.File{Rules: []policy.Rule{
		{Name: "per-src", PPS: ptr(float64(rate)), Burst: ptr(float64(burst)), Key: "src", MaxFlows: ptr(maxFlows)},
	}}
	_, p, eng := bothPaths(t, f)
	start := int64(1_700_000_000_000_000_000)
	span := int64(seconds * time.Second)
	floodGap := span / flood
	dst := netip.MustParseAddr("10.8.0.1")
	// One frame for every packet: a source address set in place.
	fr := build(flowDesc{netip.MustParseAddr("10.1.0.1"), dst, 17, 5000, 6000}, 64)
	ip := fr[14:]
	// Distinct sources: i → a bijection of 24 bits (an odd multiplier),
	// in 11.0.0.0/8; the legitimate ones are in 10.1.0.0/24.
	spoof := func(i int) {
		x := uint32(i) * 0x9e3779 & 0xffffff
		binary.BigEndian.PutUint32(ip[12:], 11<<24|x)
	}
	ctx := make([]byte, skbSize)
	out := make([]byte, skbSize)
	opts := ebpf.RunOptions{Data: fr, Context: ctx, ContextOut: out}
	var d shaper.Decision
	agree, packets := 0, 0
	var times [legit][]int64 // each legitimate source's packet times
	var got [legit]int
	next := make([]int, legit) // each legitimate source's next packet
	for j := range times {
		times[j] = legitTimes(j, start, start+span)
	}
	decide := func(at int64) int {
		if err := p.SetNow(at); err != nil {
			t.Fatal(err)
		}
		ret, err := p.Prog().Run(&opts)
		if err != nil {
			t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
		}
		eng.DecidePacket(ip, nil, at, &d)
		if (ret == tcShot) == (d.Verdict == shaper.Drop) {
			agree++
		}
		packets++
		return int(ret)
	}
	t0 := time.Now()
	for i := range flood {
		at := start + int64(i)*floodGap
		// Legitimate packets due before this flood packet go first.
		for j := range next {
			for next[j] < len(times[j]) && times[j][next[j]] <= at {
				binary.BigEndian.PutUint32(ip[12:], 10<<24|1<<16|uint32(j+1))
				if decide(times[j][next[j]]) == tcOK {
					got[j]++
				}
				next[j]++
			}
		}
		spoof(i)
		decide(at)
	}
	took := time.Since(t0)
	rc, err := p.RuleCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	present, err := p.FlowCount(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets (%d spoofed sources, flow map %d) in %v: agreement %.3f%%; %d flows inserted, %d present",
		packets, flood, maxFlows, took.Round(time.Millisecond), 100*float64(agree)/float64(packets), rc.Inserts, present)
	for j := range got {
		sent := times[j][:next[j]]
		want := testutil.ExactTokenBucket(sent, burst, rate)
		t.Logf("legitimate source %d: %d of %d accepted, an exact bucket %d", j, got[j], len(sent), want)
		if math.Abs(float64(got[j]-want)) > tol*float64(want) {
			t.Errorf("source %d: %d accepted, want %d ± %.0f %%", j, got[j], want, 100*tol)
		}
	}
	if rc.Inserts < flood || int(rc.Inserts)-present < flood-maxFlows {
		t.Errorf("%d inserts, %d present: the flood did not go through the map", rc.Inserts, present)
	}
	if wantAgree && agree != packets {
		t.Errorf("%d of %d packets disagree with the Go engine", packets-agree, packets)
	}
}
