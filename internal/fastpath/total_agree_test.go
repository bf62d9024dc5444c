//go:build linux

package fastpath

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
)

// totalsPolicy: class totals of kernel rules, one of each algorithm, each
// shared by two rules with per-key limits under it (packet and byte
// costs, the rule's and the total's differing), the over-limit actions
// drop, shadow and mark, and a rule without a total beside them.
func totalsPolicy() *policy.File {
	mf := ptr(4096)
	return &policy.File{
		Totals: []policy.TotalDef{
			{Name: "guests", PPS: ptr(300.0), Burst: ptr(30.0)},
			{Name: "api", Bitrate: "4mbit", Algo: "fixed-window", Window: policy.Duration(50e6)},
			{Name: "edge", PPS: ptr(400.0), Algo: "sliding-window-counter", Window: policy.Duration(100e6)},
		},
		Rules: []policy.Rule{
			{Name: "g-udp", PPS: ptr(100.0), Burst: ptr(10.0), Key: "src", Total: "guests", MaxFlows: mf, Match: &policy.Match{Proto: []string{"udp"}, Src: []string{"10.1.0.0/16"}}},
			{Name: "g-tcp", Bitrate: "1mbit", Key: "src-dst", Total: "guests", MaxFlows: mf, Match: &policy.Match{Proto: []string{"tcp"}, Src: []string{"10.1.0.0/16"}}},
			{Name: "api-tcp", Bitrate: "1mbit", Key: "src", Total: "api", MaxFlows: mf, Match: &policy.Match{Proto: []string{"tcp"}, Dst: []string{"10.2.0.0/16"}}},
			{Name: "api-udp", PPS: ptr(200.0), Algo: "sliding-window-counter", Window: policy.Duration(50e6), Key: "src", Total: "api", MaxFlows: mf, Match: &policy.Match{Proto: []string{"udp"}, Dst: []string{"10.2.0.0/16"}}},
			{Name: "e-shadow", PPS: ptr(40.0), Mode: "shadow", Key: "src", Total: "edge", MaxFlows: mf, Match: &policy.Match{Dst: []string{"10.3.0.0/16"}}},
			{Name: "e-mark", PPS: ptr(40.0), Algo: "fixed-window", OnExceed: "mark", SetMark: "0x10/0xff", Total: "edge", MaxFlows: mf, Match: &policy.Match{Dst: []string{"10.4.0.0/16"}}},
			{Name: "plain", PPS: ptr(50.0), Key: "src", MaxFlows: mf},
		},
	}
}

// totalTraffic is traffic from many keys (n sources of each rule's
// addresses), in bursts, some GSO, some datagrams in fragments (first
// fragment first), time going forward by random steps and now and then
// back.
func totalTraffic(n, keys int, seed uint64) ([]frame, []int64) {
	r := rand.New(rand.NewPCG(seed, 3))
	a := func(pfx string, i int) netip.Addr {
		return netip.MustParseAddr(pfx + itoa(i/250) + "." + itoa(i%250+1))
	}
	var frames []frame
	var times []int64
	now := int64(1_700_000_000_000_000_000)
	id := uint32(1)
	for len(frames) < n {
		k := r.IntN(keys)
		var f flowDesc
		switch r.IntN(7) {
		case 0:
			f = flowDesc{a("10.1.", k), a("10.8.", 0), 17, uint16(40000 + k), 53}
		case 1:
			f = flowDesc{a("10.1.", k), a("10.8.", k%5), 6, uint16(40000 + k), 443}
		case 2:
			f = flowDesc{a("10.5.", k), a("10.2.", k%3), 6, uint16(30000 + k), 443}
		case 3:
			f = flowDesc{a("10.5.", k), a("10.2.", 0), 17, uint16(30000 + k), 8080}
		case 4:
			f = flowDesc{a("10.6.", k), a("10.3.", 0), 17, 1000, 2000}
		case 5:
			f = flowDesc{a("10.6.", k), a("10.4.", k%4), 6, uint16(1000 + k%7), 80}
		default:
			f = flowDesc{a("10.7.", k), a("10.9.", 0), 17, 5, 6}
		}
		burst := 1
		if r.IntN(10) == 0 {
			burst = 5 + r.IntN(40)
		}
		for range burst {
			size := 40 + r.IntN(1460)
			b := build(f, size)
			var frs []frame
			switch {
			case r.IntN(12) == 0 && size > 600:
				for _, ip := range fragment(b[14:], 300+r.IntN(300), id) {
					frs = append(frs, ethFrame(ip, 0))
				}
				id++
			default:
				fr := frame{b: b, ip: b[14:]}
				if r.IntN(15) == 0 {
					makeGSO(&fr, r)
				}
				frs = append(frs, fr)
			}
			for _, fr := range frs {
				frames = append(frames, fr)
				now = clock{60, 4, 20_000_000, 300_000}.next(r, now)
				times = append(times, now)
			}
		}
	}
	return frames[:n], times[:n]
}

// TestAgreementTotals: the class totals decided in the kernel with their
// rules (every rule of the policy runs there), per packet as the engine
// decides them (BPF_PROG_TEST_RUN, time injected): 100 % agreement, over
// 1, 10 and 1 000 keys; the rules' and the totals' counters as the
// engine's.
func TestAgreementTotals(t *testing.T) {
	for _, keys := range []int{1, 10, 1000} {
		t.Run(itoa(keys), func(t *testing.T) {
			s, p, eng := bothPaths(t, totalsPolicy())
			for i, e := range s.Entries {
				if e.Action == Punt {
					t.Fatalf("rule %d (%s) runs in user space: this test wants all in the kernel", i, e.Name)
				}
			}
			frames, times := totalTraffic(20000, keys, uint64(keys))
			res := compare(t, p, &s, eng, frames, times, nil)
			t.Log(res)
			if res.agree != res.n {
				t.Errorf("agreement %.3f%%, want 100%%", res.pct())
			}
			checkCounters(t, p, &s, eng)
			refused := uint64(0)
			for i := range eng.NumTotals() {
				name := eng.Total(i).Name
				c, ok, err := p.TotalCounters(name)
				if err != nil || !ok {
					t.Fatalf("total %s: in the kernel %v, %v", name, ok, err)
				}
				g := eng.TotalStats(i)
				t.Logf("total %s: kernel %+v, engine %+v", name, c, g)
				if c.Packets != g.Packets || c.Accepted != g.Accepted || c.Dropped != g.Dropped {
					t.Errorf("total %s: kernel %+v, engine %+v", name, c, g)
				}
				refused += g.Dropped
			}
			if res.drops == 0 || refused == 0 || res.frags == 0 || res.gso == 0 {
				t.Errorf("the traffic exercised too little: %d drops, %d refused by totals, %d fragments, %d GSO", res.drops, refused, res.frags, res.gso)
			}
		})
	}
}

// TestReloadTotal: Reload keeps an unchanged total's state (its bucket,
// emptied by three keys before the reload, still refuses a fourth key
// after it), and starts a changed one afresh; the counters start at zero.
func TestReloadTotal(t *testing.T) {
	mk := func(burst float64) Spec {
		f := &policy.File{
			Totals: []policy.TotalDef{{Name: "up", PPS: ptr(1.0), Burst: ptr(burst)}},
			Rules:  []policy.Rule{{Name: "lim", PPS: ptr(1000.0), Key: "src", Total: "up", Match: &policy.Match{Proto: []string{"udp"}}}},
		}
		s, _, err := Compile(f, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	src := func(i int) *frame {
		b := build(flowDesc{netip.MustParseAddr("10.1.0." + itoa(i)), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)
		return &frame{b: b, ip: b[14:]}
	}
	now := int64(1_700_000_000_000_000_000)
	p := needKernel(t, mk(2))
	for i, want := range []int{tcOK, tcOK, tcShot} {
		if v, _, _ := run(t, p, src(i+1), now); v != want {
			t.Fatalf("before the reload, key %d: verdict %d, want %d", i+1, v, want)
		}
	}
	for _, c := range []struct {
		burst float64
		want  int
		what  string
	}{{2, tcShot, "unchanged: its state kept"}, {3, tcOK, "changed: afresh"}} {
		np, err := Reload(mk(c.burst), p)
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		p = np
		if tc, ok, err := p.TotalCounters("up"); err != nil || !ok || tc != (TotalCounters{}) {
			t.Errorf("%s: counters after the reload %+v %v %v, want zero", c.what, tc, ok, err)
		}
		if v, _, _ := run(t, p, src(9), now); v != c.want {
			t.Errorf("total %s: a new key's verdict %d, want %d", c.what, v, c.want)
		}
	}
	p.Close()
}
