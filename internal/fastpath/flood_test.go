//go:build linux

package fastpath

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"sort"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestFlood: spoofed sources, each sending one packet, many times the flow
// map's size, against a src-keyed limit; the legitimate sources keep their
// rate within ±5 % of the ideal (burst + rate × time: the LRU map keeps
// their state, it does not start them afresh with a full bucket), and every
// packet agrees with the Go engine, whose flow table is under the same
// flood.
func TestFlood(t *testing.T) {
	const (
		rate, burst = 100.0, 10.0
		maxFlows    = 16384
		legit       = 8
		offered     = 200.0 // per legitimate source, packets/s
		seconds     = 5
		flood       = 100_000 // spoofed packets: 6× the map
	)
	f := &policy.File{Rules: []policy.Rule{
		{Name: "per-src", PPS: ptr(rate), Burst: ptr(burst), Key: "src", MaxFlows: ptr(maxFlows)},
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
	type ev struct {
		at  int64
		src int // -1: spoofed
		fr  frame
	}
	start := int64(1_700_000_000_000_000_000)
	span := int64(seconds * 1e9)
	r := rand.New(rand.NewPCG(3, 4))
	dst := netip.MustParseAddr("10.8.0.1")
	var evs []ev
	for i := range legit {
		src := netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)})
		gap := int64(1e9 / offered)
		for at := start + int64(i)*1000; at < start+span; at += gap {
			b := build(flowDesc{src, dst, 17, 5000, 6000}, 200)
			evs = append(evs, ev{at, i, frame{b: b, ip: b[14:]}})
		}
	}
	for range flood {
		a := r.Uint32()
		src := netip.AddrFrom4([4]byte{11, byte(a >> 16), byte(a >> 8), byte(a)})
		b := build(flowDesc{src, dst, 17, 5000, 6000}, 64)
		evs = append(evs, ev{start + r.Int64N(span), -1, frame{b: b, ip: b[14:]}})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var got [legit]int
	var d shaper.Decision
	agree := 0
	for i := range evs {
		e := &evs[i]
		ret, _, _ := run(t, p, &e.fr, e.at)
		eng.DecidePacket(e.fr.ip, nil, e.at, &d)
		if (ret == tcShot) == (d.Verdict == shaper.Drop) {
			agree++
		}
		if e.src >= 0 && ret == tcOK {
			got[e.src]++
		}
	}
	ideal := burst + rate*seconds
	t.Logf("%d packets (%d spoofed sources, flow map %d): agreement %.3f%%; legitimate sources accepted %v, ideal %.0f",
		len(evs), flood, maxFlows, 100*float64(agree)/float64(len(evs)), got, ideal)
	for i, n := range got {
		if math.Abs(float64(n)-ideal) > 0.05*ideal {
			t.Errorf("source %d: %d accepted, want %.0f ± 5 %%", i, n, ideal)
		}
	}
	if agree != len(evs) {
		t.Errorf("%d of %d packets disagree with the Go engine", len(evs)-agree, len(evs))
	}
}
