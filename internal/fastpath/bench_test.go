//go:build linux

package fastpath

import (
	"net/netip"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// benchFrames are 64-byte UDP packets of flows of the mixed policy's
// token-bucket rule ("udp-tb") and of its last rule ("rest").
func benchFrames() map[string][]byte {
	a := netip.MustParseAddr
	return map[string][]byte{
		"tb":   build(flowDesc{a("10.1.0.1"), a("10.8.0.1"), 17, 40000, 5000}, 50),
		"rest": build(flowDesc{a("10.6.0.1"), a("10.7.0.1"), 17, 3000, 3001}, 50),
	}
}

// BenchmarkKernel: one packet decided by the program through
// BPF_PROG_TEST_RUN, repeated in the kernel (the time the kernel reports per
// run; the flow is over its limit after the burst, so mostly drops).
//
//	go test -run '^$' -bench 'Kernel|GoEngine' ./internal/fastpath
func BenchmarkKernel(b *testing.B) {
	s, _, err := Compile(mixed(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := needKernel(b, s)
	if err := p.SetNow(1_700_000_000_000_000_000); err != nil {
		b.Fatal(err)
	}
	for name, fr := range benchFrames() {
		b.Run(name, func(b *testing.B) {
			_, d, err := p.Prog().Benchmark(fr, b.N, nil)
			if err != nil {
				b.Skipf("BPF_PROG_TEST_RUN: %v", err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
			b.ReportMetric(1e9/float64(max(d.Nanoseconds(), 1)), "packets/s")
		})
	}
}

// BenchmarkGoEngine: the same packets through shaper's DecidePacket.
func BenchmarkGoEngine(b *testing.B) {
	c, err := mixed().Compile(policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := shaper.NewPolicy(c.Policy())
	if err != nil {
		b.Fatal(err)
	}
	for name, fr := range benchFrames() {
		b.Run(name, func(b *testing.B) {
			var d shaper.Decision
			m := &shaper.Meta{}
			ip := fr[14:]
			now := int64(1_700_000_000_000_000_000)
			b.ReportAllocs()
			for b.Loop() {
				e.DecidePacket(ip, m, now, &d)
			}
		})
	}
}
