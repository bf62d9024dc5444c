//go:build linux

package fastpath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// v6ext builds an IPv6 packet with the given extension headers (next-header
// numbers, 8 bytes each; a 44 is a fragment header of offset off) before a
// UDP header.
func v6ext(hdrs []byte, off uint16) []byte {
	b := make([]byte, 40+8*len(hdrs)+8)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	b[6] = 17
	if len(hdrs) > 0 {
		b[6] = hdrs[0]
	}
	s, d := netip.MustParseAddr("fd00:1::1").As16(), netip.MustParseAddr("fd00:2::1").As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	for i := range hdrs {
		h := b[40+8*i:]
		h[0] = 17
		if i+1 < len(hdrs) {
			h[0] = hdrs[i+1]
		}
		if hdrs[i] == 44 {
			binary.BigEndian.PutUint16(h[2:], off<<3)
		}
	}
	u := b[40+8*len(hdrs):]
	binary.BigEndian.PutUint16(u[0:], 1234)
	binary.BigEndian.PutUint16(u[2:], 5050)
	return b
}

// FuzzAgreement runs any IP packet through the program and the Go engine
// (the mixed policy; one program and engine for the whole run, time going
// forward by the input's step) and fails on a disagreement as TestAgreement
// counts them. The seeds (run by go test) cover IPv6 extension header
// chains (walked, cut, longer than the first walk: 33 to 300 headers),
// fragments of both families alone and in sequences (first fragment first,
// and last), ICMP and ports cut short.
//
//	go test -run '^$' -fuzz FuzzAgreement -fuzztime 60s ./internal/fastpath
func FuzzAgreement(f *testing.F) {
	a := netip.MustParseAddr
	seeds := [][]byte{
		build(flowDesc{a("10.1.0.1"), a("10.8.0.1"), 17, 40000, 5000}, 100)[14:],
		build(flowDesc{a("10.1.2.1"), a("10.8.0.1"), 6, 40000, 443}, 1500)[14:],
		build(flowDesc{a("10.9.1.1"), a("10.8.0.1"), 1, 7, 7}, 64)[14:],
		build(flowDesc{a("fd00:1::1"), a("fd00:2::1"), 58, 7, 7}, 64)[14:],
		v6ext([]byte{0, 43, 60}, 0),
		v6ext([]byte{44}, 0),
		v6ext([]byte{44}, 5),
		v6ext(bytes.Repeat([]byte{60}, maxExt), 0),
		v6ext(bytes.Repeat([]byte{60}, maxExt+1), 0), // past the first walk: bpf_loop
		v6ext(bytes.Repeat([]byte{0, 43, 60}, 100), 0),
		v6ext(append(bytes.Repeat([]byte{60}, 40), 44), 0),
		v6ext(append(bytes.Repeat([]byte{60}, 40), 44), 5),
		v6ext(bytes.Repeat([]byte{60}, 300), 0)[:2000], // cut past the first walk
		v6ext([]byte{0, 43, 60}, 0)[:60],               // chain cut
	}
	frag4 := build(flowDesc{a("10.1.0.1"), a("10.8.0.1"), 17, 40000, 5000}, 100)[14:]
	binary.BigEndian.PutUint16(frag4[6:], 100)
	tiny := build(flowDesc{a("10.1.0.1"), a("10.8.0.1"), 6, 40000, 5000}, 100)[14:36]
	binary.BigEndian.PutUint16(tiny[2:], 22)
	seeds = append(seeds, frag4, tiny)
	// Fragment sequences (the program keeps the first fragments it saw
	// across inputs, as the mirror does): in order, and a later fragment
	// before its first, of both families.
	seeds = append(seeds, datagram("10.1.0.1", "10.8.0.1", 40000, 5000, 2000, 900, 7)...)
	seeds = append(seeds, datagram("fd00:1::1", "fd00:2::1", 4000, 5050, 2000, 900, 8)...)
	rev := datagram("10.1.0.2", "10.8.0.1", 40000, 6000, 1200, 900, 9)
	seeds = append(seeds, rev[1], rev[0])
	for _, s := range seeds {
		f.Add(s, uint32(1e6), uint32(0))
	}
	s, _, err := Compile(mixed(), policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	p := needKernel(f, s)
	c, err := mixed().Compile(policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	eng, err := shaper.NewPolicy(c.Policy())
	if err != nil {
		f.Fatal(err)
	}
	fm := newFragMirror() // the first fragments the program has seen
	var mu sync.Mutex     // the engine, the mirror and the time are shared by the workers
	now := int64(1_700_000_000_000_000_000)
	f.Fuzz(func(t *testing.T, ip []byte, step, mark uint32) {
		if len(ip) < 20 || ip[0]>>4 == 6 && len(ip) < 40 || len(ip) > 3000 {
			t.Skip("BPF_PROG_TEST_RUN refuses an IP header cut short, and frames over a page")
		}
		mu.Lock()
		defer mu.Unlock()
		now += int64(step)
		fr := []frame{ethFrame(ip, mark&^s.PuntMark)}
		if res := compare(t, p, &s, eng, fr, []int64{now}, fm); res.agree != 1 {
			t.Fatalf("disagreement: %v", res)
		}
	})
}
