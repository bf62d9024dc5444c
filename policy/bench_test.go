package policy

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// benchPackets are n IPv4 packets, one per flow, that hit each rule of the
// example policy in turn: i%4 == 0 TCP to port 22 from 10.9.0.0/16 (mgmt),
// 1 UDP to port 53 (dns), 2 TCP to port 80 (web-trial), 3 UDP to port 9000
// (rest). Packet i comes from 10.(i>>8).(i&255).1 (10.9.(i>>8).(i&255) for
// mgmt) and port 1024+i%50000, so each is its own flow for every key, and
// from one /24 of bigPolicy's each.
func benchPackets(n int) [][]byte {
	pkts := make([][]byte, n)
	for i := range pkts {
		b := make([]byte, 28+36)
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		b[8] = 64
		src := [4]byte{10, byte(i >> 8), byte(i), 1}
		var dport uint16
		switch i % 4 {
		case 0:
			b[9], dport = flows.ProtoTCP, 22
			src = [4]byte{10, 9, byte(i >> 8), byte(i)}
		case 1:
			b[9], dport = flows.ProtoUDP, 53
		case 2:
			b[9], dport = flows.ProtoTCP, 80
		case 3:
			b[9], dport = flows.ProtoUDP, 9000
		}
		copy(b[12:], src[:])
		copy(b[16:], []byte{10, 255, 0, 1})
		binary.BigEndian.PutUint16(b[20:], uint16(1024+i%50000))
		binary.BigEndian.PutUint16(b[22:], dport)
		pkts[i] = b
	}
	return pkts
}

// BenchmarkPolicy compares, on the same 10 000 flows, the one-rule engine
// (shaper.New, as the limiter flags make it) with the engine running the
// example policy (4 rules) and a policy of 100 rules carrying 10 000 CIDRs.
// Compare the three within one run:
//
//	go test -run '^$' -bench Policy -count 5 ./policy
func BenchmarkPolicy(b *testing.B) {
	const n = 10_000
	pkts := benchPackets(n)
	example, err := os.ReadFile("testdata/example.toml")
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, e *shaper.Engine) {
		var d shaper.Decision
		now := int64(1e18)
		for _, p := range pkts {
			e.DecidePacket(p, nil, now, &d)
		}
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			now += 100
			e.DecidePacket(pkts[i], nil, now, &d)
			if i++; i == n {
				i = 0
			}
		}
	}
	b.Run("single-rule", func(b *testing.B) {
		e, err := shaper.New(shaper.Config{Rate: 1e6, Burst: 100, MaxFlows: n})
		if err != nil {
			b.Fatal(err)
		}
		run(b, e)
	})
	for _, c := range []struct{ name, src string }{
		{"example-4-rules", string(example)},
		{"100-rules-10k-cidrs", bigPolicy(100, n)},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := shaper.NewPolicy(mustCompile(b, c.src, Options{}).Policy())
			if err != nil {
				b.Fatal(err)
			}
			run(b, e)
		})
	}
}

// newEngines is an engine for each policy.
func newEngines(tb testing.TB, pols ...shaper.Policy) []*shaper.Engine {
	var engines []*shaper.Engine
	for _, p := range pols {
		e, err := shaper.NewPolicy(p)
		if err != nil {
			tb.Fatal(err)
		}
		engines = append(engines, e)
	}
	return engines
}

// slicer is decideSlice (passes over pkts on an engine, with m) with its
// clock carried from call to call, after one call on each of engines (over
// pkts) to warm them.
func slicer(engines []*shaper.Engine, pkts [][]byte, m *shaper.Meta, passes int) func(e *shaper.Engine, pkts [][]byte) float64 {
	var d shaper.Decision
	now := int64(1e18)
	slice := func(e *shaper.Engine, pkts [][]byte) (ns float64) {
		ns, now = decideSlice(e, pkts, m, passes, now, &d)
		return ns
	}
	for _, e := range engines {
		slice(e, pkts)
	}
	return slice
}

// decideSlice decides pkts with e passes times over, the clock from now
// on by 100 ns a packet, and returns the time per packet in ns and the
// clock: one slice of the ratio benchmarks' turns.
func decideSlice(e *shaper.Engine, pkts [][]byte, m *shaper.Meta, passes int, now int64, d *shaper.Decision) (float64, int64) {
	start := time.Now()
	for range passes {
		for _, p := range pkts {
			now += 100
			e.DecidePacket(p, m, now, d)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(passes*len(pkts)), now
}

// BenchmarkPolicyRatio measures the engines of BenchmarkPolicy in turns,
// many short slices each (every slice 20 passes over the flows, the first
// warming the caches), and reports the median over the turns of each
// policy engine's time per packet divided by the one-rule engine's in the
// same turn: ratios that hold on a machine other processes load, where
// separate benchmarks drift apart. It adds the 100-rule policy with a
// trivial classifier (rule = flow number mod 100), which prices the 100
// flow tables apart from the classifier.
//
//	go test -run '^$' -bench PolicyRatio -benchtime 1x ./policy
func BenchmarkPolicyRatio(b *testing.B) {
	const n, passes, turns = 10_000, 20, 25
	pkts := benchPackets(n)
	example, err := os.ReadFile("testdata/example.toml")
	if err != nil {
		b.Fatal(err)
	}
	single, err := shaper.New(shaper.Config{Rate: 1e6, Burst: 100, MaxFlows: n})
	if err != nil {
		b.Fatal(err)
	}
	big := mustCompile(b, bigPolicy(100, n), Options{}).Policy()
	trivial := big
	trivial.Classifier = modClassifier(100)
	pols := []shaper.Policy{mustCompile(b, string(example), Options{}).Policy(), big, trivial}
	names := []string{"example/single", "100rules/single", "100tables-trivial/single"}
	engines := append([]*shaper.Engine{single}, newEngines(b, pols...)...)
	slice := slicer(engines, pkts, nil, passes)
	// Packets cycling through the flows in order favour one big table
	// (its entries are touched in the order they were made, which the
	// hardware prefetches) over many small ones; traffic comes in no such
	// order. The same turns with the packets shuffled (a fixed seed: the
	// same order for every engine) give the ratios without that bias.
	shuffled := slices.Clone(pkts)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	median := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	orders := []struct {
		suffix string
		pkts   [][]byte
	}{{"", pkts}, {"-shuffled", shuffled}}
	ratios := make([][][]float64, len(orders))
	base := make([][]float64, len(orders))
	for b.Loop() {
		for o, order := range orders {
			ratios[o] = make([][]float64, len(pols))
			for range turns {
				a := slice(engines[0], order.pkts)
				base[o] = append(base[o], a)
				for i, e := range engines[1:] {
					ratios[o][i] = append(ratios[o][i], slice(e, order.pkts)/a)
				}
			}
		}
	}
	for o, order := range orders {
		b.ReportMetric(median(base[o]), "single-ns/pkt"+order.suffix)
		for i, name := range names {
			b.ReportMetric(median(ratios[o][i]), name+order.suffix)
		}
	}
}

// modClassifier picks rule (flow number mod n) for benchPackets' packets.
type modClassifier int

func (c modClassifier) Classify(p *flows.Packet, _ *shaper.Meta) int {
	return (int(p.Src[1])<<8 | int(p.Src[2])) % int(c)
}

// BenchmarkClassify is the classifier alone on the packets above.
func BenchmarkClassify(b *testing.B) {
	const n = 10_000
	raw := benchPackets(n)
	pkts := make([]flows.Packet, n)
	for i, r := range raw {
		pkts[i].Decode(r)
	}
	example, _ := os.ReadFile("testdata/example.toml")
	for _, c := range []struct{ name, src string }{
		{"example-4-rules", string(example)},
		{"100-rules-10k-cidrs", bigPolicy(100, n)},
		{"4000-rules", bigPolicy(4000, n)},
	} {
		b.Run(c.name, func(b *testing.B) {
			cl := mustCompile(b, c.src, Options{}).Policy().Classifier
			m := &shaper.Meta{}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				cl.Classify(&pkts[i], m)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// BenchmarkLookup sets the thresholds between scans and tables
// (linPrefixes, linPorts): one rule matching k prefixes or k port ranges,
// looked up by a scan and by the table, with addresses and ports spread
// over what the entries cover and what they do not.
func BenchmarkLookup(b *testing.B) {
	defer func(p, q int) { linPrefixes, linPorts = p, q }(linPrefixes, linPorts)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{2, 4, 8, 16, 32} {
		var cidrs, ports []string
		for j := range k {
			cidrs = append(cidrs, fmt.Sprintf("%q", fmt.Sprintf("10.%d.%d.0/24", j, rng.IntN(256))))
			ports = append(ports, fmt.Sprintf("\"%d-%d\"", 1000*j, 1000*j+rng.IntN(500)))
		}
		addrs := make([]flows.Packet, 1024)
		for i := range addrs {
			p := &addrs[i]
			p.Class, p.Proto = flows.IPv4, flows.ProtoUDP
			p.Src = [16]byte{10, byte(rng.IntN(k + 2)), byte(rng.IntN(256)), 1}
			p.DstPort = uint16(rng.IntN(1000 * (k + 1)))
		}
		for _, c := range []struct{ dim, match string }{
			{"prefixes", "src = [" + strings.Join(cidrs, ", ") + "]"},
			{"ports", "dport = [" + strings.Join(ports, ", ") + "]"},
		} {
			for _, table := range []bool{false, true} {
				linPrefixes, linPorts = 1<<20, 1<<20
				how := "scan"
				if table {
					linPrefixes, linPorts, how = 0, 0, "table"
				}
				b.Run(fmt.Sprintf("%s=%d/%s", c.dim, k, how), func(b *testing.B) {
					cl := mustCompile(b, "[[rule]]\nname = \"a\"\npps = 1\nmatch = { "+c.match+" }\n", Options{}).Policy().Classifier
					m := &shaper.Meta{}
					i := 0
					for b.Loop() {
						cl.Classify(&addrs[i&1023], m)
						i++
					}
				})
			}
		}
	}
}
