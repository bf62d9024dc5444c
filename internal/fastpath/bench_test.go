//go:build linux

package fastpath

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// benchFrames are 64-byte UDP packets of flows of the mixed policy's
// token-bucket rule ("udp-tb") and of its last rule ("rest"), and IPv6 UDP
// packets behind 32 destination-options headers (ext32: the program's loop
// alone) and 300 (ext300: the rest by bpf_loop, fastpath_ext6).
func benchFrames() map[string][]byte {
	a := netip.MustParseAddr
	return map[string][]byte{
		"tb":     build(flowDesc{a("10.1.0.1"), a("10.8.0.1"), 17, 40000, 5000}, 50),
		"rest":   build(flowDesc{a("10.6.0.1"), a("10.7.0.1"), 17, 3000, 3001}, 50),
		"ext32":  ethFrame(v6ext(bytes.Repeat([]byte{60}, maxExt), 0), 0).b,
		"ext300": ethFrame(v6ext(bytes.Repeat([]byte{60}, 300), 0), 0).b,
	}
}

// BenchmarkKernel: one packet decided by the program through
// BPF_PROG_TEST_RUN, repeated in the kernel (the time the kernel reports per
// run; the flow is over its limit after the burst, so mostly drops).
//
//	go test -run '^$' -bench 'Kernel|GoEngine' ./internal/fastpath
func BenchmarkKernel(b *testing.B) { benchKernel(b, mixed()) }

// BenchmarkKernelTotal is BenchmarkKernel with the tb and rest rules
// charging one total (a limit far above the traffic's: the key's limit
// decides, the total put back), for the cost of the total's lock and state.
func BenchmarkKernelTotal(b *testing.B) {
	f := mixed()
	f.Totals = []policy.TotalDef{{Name: "all", PPS: ptr(1e9), Burst: ptr(1e6)}}
	for i := range f.Rules {
		if n := f.Rules[i].Name; n == "udp-tb" || n == "rest" {
			f.Rules[i].Total = "all"
		}
	}
	benchKernel(b, f)
}

func benchKernel(b *testing.B, f *policy.File) {
	p := loadAt(b, f, 1_700_000_000_000_000_000)
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

// benchPolicy is a policy of n rules for BenchmarkProgram whose last rule
// is the bench's (scripts/bench-fastpath.sh: a token bucket per 5-tuple on
// UDP to port 9000, 100/s burst 50) and whose n-1 rules above it match on
// prefixes, ports and marks but not the benchmark's packet (from 10.201.0.1
// to 10.201.0.2, UDP 40000 → 9000, mark 0), so that the program walks them
// all: the cost of a policy of n rules for a packet of its last one. With
// n > 1 the last rule also matches on its source prefix.
func benchPolicy(n int) *policy.File {
	f := &policy.File{}
	for i := range n - 1 {
		r := policy.Rule{Name: "r" + itoa(i), PPS: ptr(1000.0), MaxFlows: ptr(1024)}
		switch i % 4 {
		case 0: // a prefix the packet is not in
			r.Match = &policy.Match{Src: []string{"10." + itoa(i) + ".0.0/16", "fd00:" + itoa(i) + "::/32"}}
		case 1: // ports the packet does not have
			r.Match = &policy.Match{Proto: []string{"udp", "tcp"}, Dport: []string{itoa(1000+i) + "-" + itoa(1010+i), itoa(2000 + i)}}
		case 2: // a mark the packet does not carry
			r.Action = "accept"
			r.PPS = nil
			r.MaxFlows = nil
			r.Match = &policy.Match{Mark: "0x" + itoa(i+1) + "/0xff"}
		case 3: // a destination prefix and a port
			r.Action = "drop"
			r.PPS = nil
			r.MaxFlows = nil
			r.Match = &policy.Match{Proto: []string{"udp"}, Dst: []string{"10.202." + itoa(i) + ".0/24"}, Dport: []string{"9000"}}
		}
		f.Rules = append(f.Rules, r)
	}
	last := policy.Rule{Name: "limit", PPS: ptr(100.0), Burst: ptr(50.0), Key: "5tuple", MaxFlows: ptr(4096),
		Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9000"}}}
	if n > 1 {
		last.Match.Src = []string{"10.201.0.0/24"}
	}
	f.Rules = append(f.Rules, last)
	return f
}

// BenchmarkProgram: the program's cost per run (BPF_PROG_TEST_RUN repeated
// in the kernel: the kernel's own time per run, ns/run) for a packet of the
// last rule of a 1-, 10- and 64-rule policy (benchPolicy), and for a
// packet no rule matches (nomatch: from 10.200.0.1) under the 10-rule one.
// The flow is over its limit after the burst: mostly drops, as in
// bench-fastpath.sh's runs. scripts/bench.sh's fastpath part runs it:
//
//	go test -run '^$' -bench 'Program' -benchtime 2000000x ./internal/fastpath
func BenchmarkProgram(b *testing.B) {
	a := netip.MustParseAddr
	hit := build(flowDesc{a("10.201.0.1"), a("10.201.0.2"), 17, 40000, 9000}, 50)
	miss := build(flowDesc{a("10.200.0.1"), a("10.201.0.2"), 17, 40000, 9000}, 50)
	for _, c := range []struct {
		name  string
		rules int
		fr    []byte
	}{
		{"rules=1", 1, hit}, {"rules=10", 10, hit}, {"rules=64", 64, hit}, {"rules=10/nomatch", 10, miss},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, why, err := Compile(benchPolicy(c.rules), policy.Options{})
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range why {
				if !r.Kernel {
					b.Fatalf("%v", r)
				}
			}
			p := needKernel(b, s)
			if err := p.SetNow(1_700_000_000_000_000_000); err != nil {
				b.Fatal(err)
			}
			_, d, err := p.Prog().Benchmark(c.fr, b.N, nil)
			if err != nil {
				b.Skipf("BPF_PROG_TEST_RUN: %v", err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/run")
		})
	}
}

// BenchmarkProgramFlows: the program's cost per run in conditions nearer
// the bench's than BenchmarkProgram's one packet repeated with a fixed
// time: the kernel's clock (cfg.now 0: bpf_ktime_get_boot_ns and the token
// bucket's refill on every packet), one BPF_PROG_TEST_RUN per packet
// (repeat 1: the syscall between runs leaves the caches as a busy receive
// path does; the kernel's time of each run summed, its timer's reading
// included), of one flow of the last rule or of 1 000 flows cycling.
// ns/run for the 1- and 10-rule policies (benchPolicy):
//
//	go test -run '^$' -bench 'ProgramFlows' -benchtime 200000x ./internal/fastpath
func BenchmarkProgramFlows(b *testing.B) {
	a := netip.MustParseAddr
	for _, c := range []struct {
		name         string
		rules, flows int
	}{
		{"rules=1/flows=1", 1, 1}, {"rules=1/flows=1000", 1, 1000}, {"rules=10/flows=1000", 10, 1000},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, _, err := Compile(benchPolicy(c.rules), policy.Options{})
			if err != nil {
				b.Fatal(err)
			}
			p := needKernel(b, s)
			frames := make([][]byte, c.flows)
			for i := range frames {
				frames[i] = build(flowDesc{a("10.201.0.1"), a("10.201.0.2"), 17, uint16(20000 + i), 9000}, 50)
			}
			var sum time.Duration
			n := 0
			for b.Loop() {
				_, d, err := p.Prog().Benchmark(frames[n%len(frames)], 1, nil)
				if err != nil {
					b.Skipf("BPF_PROG_TEST_RUN: %v", err)
				}
				sum += d
				n++
			}
			b.ReportMetric(float64(sum.Nanoseconds())/float64(max(n, 1)), "ns/run")
		})
	}
}
