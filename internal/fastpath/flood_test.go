//go:build linux

package fastpath

import (
	"encoding/binary"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

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
	if raceEnabled {
		t.Skip("a million packets in one goroutine: 50 s under -race for nothing more checked; the unit stage runs it without -race")
	}
	const (
		rate, burst = 100, 10
		maxFlows    = 16384
		legit       = 8
		offered     = 200 // per legitimate source, packets/s
		seconds     = 10
		flood       = 1_000_000 // spoofed packets, each from its own source
	)
	f := &policy.File{Rules: []policy.Rule{
		{Name: "per-src", PPS: ptr(float64(rate)), Burst: ptr(float64(burst)), Key: "src", MaxFlows: ptr(maxFlows)},
	}}
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	c, err := f.Compile(policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := shaper.NewPolicy(c.Policy())
	if err != nil {
		t.Fatal(err)
	}
	start := int64(1_700_000_000_000_000_000)
	span := int64(seconds * time.Second)
	floodGap := span / flood
	legitGap := int64(time.Second) / offered
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
	next := make([]int64, legit) // each legitimate source's next packet
	for j := range next {
		next[j] = start + int64(j)*legitGap/legit + 1000
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
			for next[j] <= at {
				binary.BigEndian.PutUint32(ip[12:], 10<<24|1<<16|uint32(j+1))
				if decide(next[j]) == tcOK {
					got[j]++
				}
				times[j] = append(times[j], next[j])
				next[j] += legitGap
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
		want := exactTokenBucket(times[j], burst, rate)
		t.Logf("legitimate source %d: %d of %d accepted, an exact bucket %d", j, got[j], len(times[j]), want)
		if math.Abs(float64(got[j]-want)) > 0.05*float64(want) {
			t.Errorf("source %d: %d accepted, want %d ± 5 %%", j, got[j], want)
		}
	}
	if rc.Inserts < flood || int(rc.Inserts)-present < flood-maxFlows {
		t.Errorf("%d inserts, %d present: the flood did not go through the map", rc.Inserts, present)
	}
	if agree != packets {
		t.Errorf("%d of %d packets disagree with the Go engine", packets-agree, packets)
	}
}

// exactTokenBucket is how many packets at times ns (in order) an exact
// token bucket accepts: capacity burst packets, full at the first packet,
// refilled at rate packets/s (cmd/packetshaper's, for its flood test).
// Integer arithmetic in billionths of a packet.
func exactTokenBucket(ns []int64, burst, rate int64) int {
	const unit = 1_000_000_000
	capacity := burst * unit
	tokens, n := capacity, 0
	for i, t := range ns {
		if i > 0 {
			tokens = min(capacity, tokens+rate*(t-ns[i-1]))
		}
		if tokens >= unit {
			tokens -= unit
			n++
		}
	}
	return n
}
