//go:build linux

package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// skbSize is sizeof(struct __sk_buff); mark is at offset 8.
const skbSize = 192

// tc verdicts.
const (
	tcOK   = 0
	tcShot = 2
)

// frame is an Ethernet frame for one synthetic packet (or, l3, a frame of
// an L3 device: b is ip, see l3Frame).
type frame struct {
	b    []byte
	ip   []byte // b from the IP header on
	mark uint32
	// A GSO/GRO packet: skb->gso_size and gso_segs (0: the program
	// counts the segments from the length).
	gsoSize, gsoSegs uint32
	l3               bool
}

type flowDesc struct {
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
}

// build makes an Ethernet frame: IPv4 or IPv6, then a transport header of
// proto (TCP, UDP: ports; ICMP/ICMPv6: an echo request), padded to size
// bytes of IP packet.
func build(f flowDesc, size int) []byte {
	v6 := f.src.Is6()
	hl := 20
	if v6 {
		hl = 40
	}
	size = max(size, hl+8)
	b := make([]byte, 14+size)
	binary.BigEndian.PutUint16(b[12:], map[bool]uint16{false: 0x0800, true: 0x86dd}[v6])
	ip := b[14:]
	if v6 {
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(size-40))
		ip[6], ip[7] = f.proto, 64
		s, d := f.src.As16(), f.dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	} else {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(size))
		ip[8], ip[9] = 64, f.proto
		s, d := f.src.As4(), f.dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	}
	l4 := ip[hl:]
	switch f.proto {
	case 1, 58:
		l4[0] = map[bool]byte{false: 8, true: 128}[v6]
		binary.BigEndian.PutUint16(l4[4:], f.sport)
	default:
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// mixed is a policy with a rule of every kind the kernel runs, and some it
// does not.
func mixed() *policy.File {
	mf := ptr(4096)
	return &policy.File{Rules: []policy.Rule{
		{Name: "dns-drop", Action: "drop", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"53"}}},
		{Name: "ping", Action: "accept", Match: &policy.Match{Proto: []string{"icmp"}, Src: []string{"10.9.0.0/16"}}},
		{Name: "udp-tb", PPS: ptr(200.0), Burst: ptr(20.0), MaxFlows: mf, Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"5000-5100", "6000"}, Src: []string{"10.1.0.0/16", "fd00:1::/32"}}},
		{Name: "shaped", PPS: ptr(100.0), Algo: "leaky-bucket", MaxFlows: mf, Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"7000"}}},
		{Name: "tcp-fw-bytes", Bitrate: "2mbit", Algo: "fixed-window", Window: policy.Duration(100e6), Key: "src", MaxFlows: mf, Match: &policy.Match{Proto: []string{"tcp"}, Src: []string{"10.1.2.0/24"}}},
		{Name: "swc-dst", PPS: ptr(300.0), Algo: "sliding-window-counter", Window: policy.Duration(50e6), Key: "dst", MaxFlows: mf, Match: &policy.Match{Dst: []string{"10.2.0.0/16"}}},
		{Name: "shadow", PPS: ptr(50.0), Mode: "shadow", MaxFlows: mf, Match: &policy.Match{Dst: []string{"10.3.0.0/16"}}},
		{Name: "marker", PPS: ptr(50.0), OnExceed: "mark", SetMark: "0x10/0xff", MaxFlows: mf, Match: &policy.Match{Dst: []string{"10.4.0.0/16"}}},
		{Name: "rest", Bitrate: "1mbit", Key: "src-dst", SrcPrefix4: ptr(24), DstPrefix4: ptr(24), Symmetric: ptr(true), MaxFlows: mf},
	}}
}

// needKernel skips t unless it runs as root on a kernel that loads the
// program, and returns the program.
func needKernel(t testing.TB, s Spec) *Program {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: loading eBPF programs needs CAP_BPF/CAP_NET_ADMIN")
	}
	p, err := Load(s)
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("the kernel does not support the program: %v", err)
		}
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// loadRule loads the program of a one-rule policy, on the kernel's clock
// (needKernel).
func loadRule(t testing.TB, r policy.Rule) (*Program, Spec) {
	t.Helper()
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{r}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return needKernel(t, s), s
}

// oneFlow is the UDP flow of the one-flow tests, as a 64-byte frame.
func oneFlow() []byte {
	return build(flowDesc{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.8.0.1"), 17, 4000, 5000}, 64)
}

// loadAt compiles f, loads its program (needKernel) and sets its clock to
// now (0: the kernel's clock).
func loadAt(t testing.TB, f *policy.File, now int64) *Program {
	t.Helper()
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	if err := p.SetNow(now); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs one frame through the program at now: its tc verdict, the mark
// it leaves and the input interface it saw (skb->ingress_ifindex).
func run(t testing.TB, p *Program, fr *frame, now int64) (int, uint32, uint32) {
	if err := p.SetNow(now); err != nil {
		t.Fatal(err)
	}
	ctx := make([]byte, skbSize)
	binary.LittleEndian.PutUint32(ctx[8:], fr.mark)
	binary.LittleEndian.PutUint32(ctx[164:], fr.gsoSegs) // __sk_buff.gso_segs
	binary.LittleEndian.PutUint32(ctx[176:], fr.gsoSize) // __sk_buff.gso_size
	out := make([]byte, skbSize)
	prog := p.Prog()
	if fr.l3 {
		prog = p.objs.FastpathL3
	}
	ret, err := prog.Run(&ebpf.RunOptions{Data: fr.b, Context: ctx, ContextOut: out})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN of a %d-byte frame %x: %v", len(fr.b), fr.b[:min(40, len(fr.b))], err)
	}
	return int(ret), binary.LittleEndian.Uint32(out[8:]), binary.LittleEndian.Uint32(out[36:])
}

// traffic is synthetic traffic: flows of every rule, bursts over the
// limits, varied sizes, with time going forward by random steps (and a few
// going back, which must grant nothing).
func traffic(n int, seed uint64) ([]frame, []int64) {
	r := rand.New(rand.NewPCG(seed, 1))
	a := netip.MustParseAddr
	var fl []flowDesc
	add := func(src, dst string, proto uint8, sp, dp uint16) {
		fl = append(fl, flowDesc{a(src), a(dst), proto, sp, dp})
	}
	for i := range 6 {
		add("10.1.0."+itoa(i+1), "10.8.0.1", 17, uint16(40000+i), uint16(5000+i*17))
		add("10.1.2."+itoa(i+1), "10.8.0.2", 6, uint16(41000+i), 443)
		add("10.5.0."+itoa(i+1), "10.2.0."+itoa(i%3+1), 17, 1000, 2000)
		add("10.5.1."+itoa(i+1), "10.3.0.1", 6, uint16(1000+i), 80)
		add("10.5.2."+itoa(i+1), "10.4.0.1", 17, uint16(1000+i), 81)
		add("10.6."+itoa(i)+".1", "10.7.0."+itoa(i), 17, 3000, 3001)
		add("10.7.0."+itoa(i), "10.6."+itoa(i)+".9", 17, 3001, 3000) // symmetric partner
	}
	add("fd00:1::1", "fd00:2::1", 17, 4000, 6000)
	add("fd00:1::2", "fd00:2::1", 17, 4000, 5050)
	add("fd00:3::1", "fd00:2::1", 6, 4000, 80)
	add("10.9.1.1", "10.8.0.1", 1, 77, 77)
	add("10.1.0.9", "10.8.0.1", 1, 78, 78)
	add("10.1.0.9", "10.8.0.1", 17, 53, 53)
	add("10.1.0.9", "10.8.0.1", 17, 999, 7000)
	add("10.1.0.9", "10.2.0.1", 47, 0, 0) // GRE: no ports
	var frames []frame
	var times []int64
	now := int64(1_700_000_000_000_000_000)
	for len(frames) < n {
		f := fl[r.IntN(len(fl))]
		burst := 1
		if r.IntN(20) == 0 {
			burst = 10 + r.IntN(60) // over the limit
		}
		gso := r.IntN(15) == 0
		for range burst {
			size := 40 + r.IntN(1460)
			if r.IntN(4) == 0 {
				size = 64
			}
			b := build(f, size)
			if f.src.Is6() && r.IntN(8) == 0 {
				// Behind a chain longer than the program's
				// first walk (MAX_EXT), sometimes cut short.
				ip := withChain(build(f, min(size, 200))[14:], 33+r.IntN(268), r)
				if r.IntN(10) == 0 {
					ip = ip[:40+r.IntN(len(ip)-40)]
				}
				b = ethFrame(ip, 0).b
			}
			fr := frame{b: b, ip: b[14:]}
			if gso {
				makeGSO(&fr, r)
			}
			if r.IntN(10) == 0 {
				fr.mark = uint32(r.IntN(4))
			}
			frames = append(frames, fr)
			now = clock{50, 3, 50_000_000, 200_000}.next(r, now)
			times = append(times, now)
		}
	}
	return frames[:n], times[:n]
}

// clock is synthetic traffic's time: one step in back goes back by up to
// 1 ms (which must grant nothing), one in slow of the others forward by up
// to slowNs, the rest by up to fastNs.
type clock struct{ back, slow, slowNs, fastNs int }

func (c clock) next(r *rand.Rand, now int64) int64 {
	switch {
	case r.IntN(c.back) == 0:
		return now - int64(r.IntN(1e6))
	case r.IntN(c.slow) == 0:
		return now + int64(r.IntN(c.slowNs))
	}
	return now + int64(r.IntN(c.fastNs))
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestAgreement runs synthetic traffic through the program
// (BPF_PROG_TEST_RUN, time injected) and through the Go engine with the same
// times, and compares every packet: the kernel's verdict and mark where it
// decided, and where it handed the packet to user space, that the Go engine
// decided it by a rule that runs there.
func TestAgreement(t *testing.T) {
	s, p, eng := bothPaths(t, mixed())
	frames, times := traffic(20000, 7)
	res := agreeAll(t, p, &s, eng, frames, times, nil)
	// The program's own counters: every packet (all of them IP), those it
	// punted before matching, those no rule matched.
	own, err := p.RuleCounters(MaxRules)
	if err != nil {
		t.Fatal(err)
	}
	if own.Packets != uint64(res.n) {
		t.Errorf("the program's own counters: %d packets, want %d", own.Packets, res.n)
	}
	if res.drops == 0 || res.punted == 0 {
		t.Errorf("the traffic exercised too little: %d drops, %d punted", res.drops, res.punted)
	}
}

type result struct{ n, agree, kernel, punted, drops, gso, frags int }

func (r result) pct() float64 { return 100 * float64(r.agree) / float64(max(r.n, 1)) }

func (r result) String() string {
	return fmt.Sprintf("%d packets (%d GSO, %d fragments): %d decided in the kernel (%d dropped), %d handed to user space; agreement %.3f%%", r.n, r.gso, r.frags, r.kernel, r.drops, r.punted, r.pct())
}

// compare runs frames through the program and the Go engine at the same
// times and checks every packet: where the kernel decided, the same verdict
// and mark as the Go engine; where it handed the packet to user space, that
// the packet is one the program leaves there (malformed, IPv6 with
// extension headers, a user-space rule's). A GSO packet is given to the
// engine with the cost of its segments (gsoCost); a fragment as agreeFrag
// says, fm holding the first fragments seen (nil: a fresh one). It reports
// the first few disagreements.
// agreeAll compares frames as compare does, logs the result, checks the
// counters of both paths and that every packet agreed.
func agreeAll(t *testing.T, p *Program, s *Spec, eng *shaper.Engine, frames []frame, times []int64, fm *fragMirror) result {
	t.Helper()
	res := compare(t, p, s, eng, frames, times, fm)
	t.Log(res)
	checkCounters(t, p, s, eng)
	if res.agree != res.n {
		t.Errorf("agreement %.3f%%, want 100%%", res.pct())
	}
	return res
}

func compare(t *testing.T, p *Program, s *Spec, eng *shaper.Engine, frames []frame, times []int64, fm *fragMirror) result {
	t.Helper()
	if fm == nil {
		fm = newFragMirror()
	}
	var res result
	var d shaper.Decision
	for i := range frames {
		fr := &frames[i]
		fi := fragOf(fr.ip)
		var pending int64
		if fi.kind == firstFrag {
			pending = p.kernelPending(t, fi)
		}
		ret, mark, iif := run(t, p, fr, times[i])
		ok := false
		res.n++
		if fi.kind != notFrag {
			res.frags++
		}
		meta := shaper.Meta{Mark: fr.mark, InIf: iif}
		ip := fr.ip
		switch fi.kind {
		case laterFrag:
			first, found := fm.m[fi.key]
			if found && mark == fr.mark|s.PuntMark && ret == tcOK && !p.kernelFirst(t, fi) {
				// The program's LRU map evicted the first fragment.
				delete(fm.m, fi.key)
				found = false
			}
			if !found {
				// Before its first fragment (or evicted from the
				// program's map, which the mirror cannot tell):
				// user space, no rule, no bucket.
				res.punted++
				if ret == tcOK && mark == fr.mark|s.PuntMark {
					res.agree++
				} else if res.n-res.agree <= 5 {
					t.Errorf("packet %d: a later fragment without its first: kernel ret %d mark %#x, want the punt mark", i, ret, mark)
				}
				continue
			}
			// Decided as its first fragment, by its rule and flow.
			ip, meta = first.ip, shaper.Meta{Mark: first.mark, InIf: first.iif, Cost: shaper.Cost{Set: true, Bytes: fi.charge, Need: shaper.NeedNone}}
			if !first.ok {
				meta.Cost.Need = shaper.NeedOver
			}
		case firstFrag:
			// Charged with its later fragments seen before it.
			meta.Cost = shaper.Cost{Set: true, Packets: 1, Bytes: fi.charge + pending}
		default:
			if c, gso := gsoCost(fr); gso {
				res.gso++
				meta.Cost = c
			}
		}
		eng.DecidePacket(ip, &meta, times[i], &d)
		if fi.kind == firstFrag && !d.Malformed {
			fm.m[fi.key] = fragFirst{ip: fr.ip, mark: fr.mark, iif: iif, ok: !d.Exceeded}
		}
		if d.SetMark && fi.kind == laterFrag {
			// The program marks the fragment's own mark.
			e := &s.Entries[d.Rule]
			d.Mark = fr.mark&^e.SetMask | e.SetMark
		}
		if mark&s.PuntMark != 0 {
			res.punted++
			ok = mark&^s.PuntMark == fr.mark && (d.Malformed || d.Rule >= 0 && s.Entries[d.Rule].Action == Punt)
		} else {
			res.kernel++
			want, wantMark := tcOK, fr.mark
			if d.Verdict == shaper.Drop {
				want = tcShot
				res.drops++
			}
			if d.SetMark {
				wantMark = d.Mark
			}
			ok = ret == want && mark == wantMark && !d.Malformed
			if ok && d.Rule >= 0 && s.Entries[d.Rule].Action == Limit {
				// The packet was charged to the Go engine's key.
				ok = p.hasFlow(&d.Key, d.Rule)
			}
		}
		if ok {
			res.agree++
		} else if res.n-res.agree <= 5 {
			t.Errorf("packet %d (%x…) at %d: kernel ret %d mark %#x; Go verdict %v rule %d setmark %v %#x malformed %v", i, fr.ip[:min(48, len(fr.ip))], times[i], ret, mark, d.Verdict, d.Rule, d.SetMark, d.Mark, d.Malformed)
		}
	}
	return res
}

// hasFlow reports whether the program's flow map holds the state of the
// Go engine's key k of rule i.
func (p *Program) hasFlow(k *flows.Key, i int) bool {
	fk := fastpathFlowKey{Src: k.Src, Dst: k.Dst, Sport: k.SrcPort, Dport: k.DstPort, Proto: k.Proto, Family: k.Family}
	var st fastpathFlowState
	return p.tables[i] != nil && (p.tables[i].Lookup(&fk, &st) == nil || p.news[i].Lookup(&fk, &st) == nil)
}

// checkCounters compares the program's per-rule counters with the Go
// engine's for the rules that run in the kernel (those of user-space rules
// count what was punted, which the engine decided).
func checkCounters(t *testing.T, p *Program, s *Spec, eng *shaper.Engine) {
	t.Helper()
	for i, e := range s.Entries {
		c, err := p.RuleCounters(i)
		if err != nil {
			t.Fatal(err)
		}
		g := eng.RuleStats(i)
		if e.Action == Punt {
			if c.Punted != g.Packets || c.Packets != c.Punted {
				t.Errorf("rule %s: the program punted %d, the engine decided %d", e.Name, c.Punted, g.Packets)
			}
			continue
		}
		if c.Packets != g.Packets || c.Accepted != g.Accepted || c.Dropped != g.Dropped || c.Shadow != g.ShadowDropped || c.Marked != g.Marked {
			t.Errorf("rule %s: program %+v, engine %+v", e.Name, c, g)
		}
	}
}

// bothPaths compiles f for both paths: the kernel's Spec and loaded
// program (needKernel: it skips without root), and the Go engine of the
// same policy, as the agreement, flow listing and flood tests compare them.
func bothPaths(t *testing.T, f *policy.File) (Spec, *Program, *shaper.Engine) {
	t.Helper()
	s, reasons, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reasons {
		t.Log(r)
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
	return s, p, eng
}
