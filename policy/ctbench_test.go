package policy

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/shaper"
)

// ctPolicies are the example policy and the same with ct-state matches on
// its limit rules that every packet of benchPackets meets (established):
// the same packets hit the same rules, so the pair prices the ct-state
// dimension alone.
func ctPolicies(tb testing.TB) (plain, ct shaper.Policy) {
	example, err := os.ReadFile("testdata/example.toml")
	if err != nil {
		tb.Fatal(err)
	}
	src := string(example)
	withCt := strings.Replace(src, `match = { proto = ["udp"], dport = ["53"] }`, `match = { proto = ["udp"], dport = ["53"], ct-state = ["new", "established"] }`, 1)
	withCt = strings.Replace(withCt, `match = { proto = ["tcp"], dport = ["80", "443"] }`, `match = { proto = ["tcp"], dport = ["80", "443"], ct-state = ["established"] }`, 1)
	if withCt == src || strings.Count(withCt, "ct-state") != 2 {
		tb.Fatal("testdata/example.toml changed: the ct-state rules were not written")
	}
	return mustCompile(tb, src, Options{}).Policy(), mustCompile(tb, withCt, Options{}).Policy()
}

// TestDecideCtStateNoAllocs: a policy with ct-state matches decides
// without allocating, and as the plain one does.
func TestDecideCtStateNoAllocs(t *testing.T) {
	plain, ct := ctPolicies(t)
	pkts := benchPackets(100)
	es := newEngines(t, plain, ct)
	ep, ec := es[0], es[1]
	m := &shaper.Meta{CtState: shaper.CtEstablished}
	var d, d2 shaper.Decision
	now := int64(1e18)
	for _, p := range pkts {
		now += 1000
		ep.DecidePacket(p, m, now, &d)
		ec.DecidePacket(p, m, now, &d2)
		if d.Rule != d2.Rule || d.Verdict != d2.Verdict {
			t.Fatalf("the ct-state policy decided %+v, the plain one %+v", d2, d)
		}
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		now += 100
		ec.DecidePacket(pkts[i%len(pkts)], m, now, &d)
		i++
	}); n != 0 {
		t.Errorf("Decide with ct-state matches allocates %v times per packet", n)
	}
}

// BenchmarkDecideCtState: the engine with ct-state matches against the
// same policy without, in turns in the same run (as BenchmarkPolicyRatio):
// the median ratio of their times per packet, ct/plain (the bar: 1.1).
//
//	go test -run '^$' -bench DecideCtState -benchtime 1x ./policy
func BenchmarkDecideCtState(b *testing.B) {
	const n, passes, turns = 10_000, 20, 25
	pkts := benchPackets(n)
	plain, ct := ctPolicies(b)
	engines := newEngines(b, plain, ct)
	slice := slicer(engines, pkts, &shaper.Meta{CtState: shaper.CtEstablished}, passes)
	var ratios, base []float64
	for b.Loop() {
		for range turns {
			// Alternate which goes first, so that neither always
			// follows the other.
			a, c := slice(engines[0], pkts), slice(engines[1], pkts)
			a2 := slice(engines[0], pkts)
			base = append(base, (a+a2)/2)
			ratios = append(ratios, c/((a+a2)/2))
		}
	}
	slices.Sort(ratios)
	slices.Sort(base)
	b.ReportMetric(base[len(base)/2], "plain-ns/pkt")
	b.ReportMetric(ratios[len(ratios)/2], "ct/plain")
}
