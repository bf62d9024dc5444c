//go:build linux

package fastpath

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// fragEntries is the program's fragment map's size (frag.h FRAG_ENTRIES).
const fragEntries = 8192

// Fragments in the agreement tests. The queue path sees datagrams whole
// (defragmentation before the queue), the program sees their fragments.
// Agreement for a fragment sequence is defined as the program's frag.h
// does it, against the engine:
//
//   - a first fragment (offset 0, more to come) is decided as the engine
//     decides it as a packet (it carries the headers: the same rule, flow
//     key and verdict), costing a byte rate its length (IPv6: less its
//     fragment header, which the reassembled datagram does not have);
//   - a later fragment whose first fragment the program saw is decided as
//     the engine decides that first fragment again, with the same mark and
//     input interface: the same rule and flow, charged its data (a byte
//     rate; a packet rate nothing more: the datagram is one packet), never
//     refused when its first fragment was accepted (shaper.NeedNone), never
//     accepted when its limit refused it (NeedOver);
//   - a later fragment before its first one goes to user space (the punt
//     mark, no rule, no bucket: the kernel's reassembly gives it its first
//     fragment's verdict); its data is charged with the first fragment when
//     it comes (which then costs a byte rate its length and theirs).
//
// So a datagram whose fragments arrive first fragment first costs its flow
// what the engine charges it whole: one packet, or its reassembled length.

type fragKind int

const (
	notFrag fragKind = iota
	firstFrag
	laterFrag
)

type fragKey struct {
	family, proto uint8
	id            [4]byte
	src, dst      [16]byte
}

type fragInfo struct {
	kind   fragKind
	key    fragKey
	charge int64 // what the fragment costs a byte rate
	// l4off and proto: the transport header's offset (0 when the chain
	// is cut) and protocol, as decode.h leaves them; length, the IP
	// length it charges a plain packet.
	l4off  int
	proto  uint8
	length int64
	ok     bool // decoded (not malformed, not over the walk)
}

type fragFirst struct {
	ip        []byte
	mark, iif uint32
	ok        bool // the limit accepted it
}

// fragMirror is the program's fragment map as the test knows it: the first
// fragments (the data of later fragments seen before their first is read
// from the program's map, kernelPending).
type fragMirror struct {
	m map[fragKey]fragFirst
}

func newFragMirror() *fragMirror { return &fragMirror{m: map[fragKey]fragFirst{}} }

func isExt(n uint8) bool { return n == 0 || n == 43 || n == 60 || n == 51 || n == 44 }

// fragOf decodes ip as decode.h's decode_ip does (wire = len(ip)): its
// fragment kind, reassembly key and cost.
func fragOf(ip []byte) fragInfo {
	var fi fragInfo
	wire := len(ip)
	if wire >= 20 && ip[0]>>4 == 4 {
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || total < ihl && total != 0 {
			return fi
		}
		length := total
		if total == 0 {
			length = wire
		}
		length = max(length, ihl)
		fi.ok, fi.l4off, fi.proto, fi.length = true, ihl, ip[9], int64(length)
		fi.key.family, fi.key.proto = 4, ip[9]
		copy(fi.key.id[:], ip[4:6])
		copy(fi.key.src[:], ip[12:16])
		copy(fi.key.dst[:], ip[16:20])
		frag := binary.BigEndian.Uint16(ip[6:])
		switch {
		case frag&0x1fff != 0:
			fi.kind, fi.charge = laterFrag, int64(length-ihl)
		case frag&0x2000 != 0:
			fi.kind, fi.charge = firstFrag, int64(length)
		}
		return fi
	}
	if wire < 40 || ip[0]>>4 != 6 {
		return fi
	}
	plen := int(binary.BigEndian.Uint16(ip[4:]))
	end, length := 40+plen, 40+plen
	if plen == 0 {
		end, length = wire, wire
	}
	end = min(end, wire)
	fi.ok, fi.length, fi.proto = true, int64(length), 255
	fi.key.family = 6
	copy(fi.key.src[:], ip[8:24])
	copy(fi.key.dst[:], ip[24:40])
	next, off := ip[6], 40
	// The whole chain, as flows' decode6 walks it: decode.h walks MAX_EXT
	// headers and the rest with bpf_loop (fastpath_ext6), as long as the
	// bytes last.
	for isExt(next) {
		if off+8 > end {
			return fi // cut
		}
		e := ip[off:]
		if next == 44 {
			fo := binary.BigEndian.Uint16(e[2:])
			next = e[0]
			off += 8
			copy(fi.key.id[:], e[4:8])
			if fo>>3 != 0 {
				fi.kind, fi.charge = laterFrag, int64(max(length-off, 0))
				return fi
			}
			if fo&1 != 0 && fi.kind != firstFrag {
				length -= 8 // the reassembled datagram has no fragment header
				fi.kind, fi.charge = firstFrag, int64(length)
			}
			continue
		}
		n := (int(e[1]) + 1) * 8
		if next == 51 {
			n = (int(e[1]) + 2) * 4
		}
		if off+n > end {
			return fi
		}
		next, off = e[0], off+n
	}
	fi.proto, fi.l4off = next, off
	return fi
}

// gsoCost is decode.h's fastpath_gso for a frame with gso_size set: the cost of
// its segments, and whether it is a GSO packet of more than one.
func gsoCost(fr *frame) (shaper.Cost, bool) {
	if fr.gsoSize == 0 {
		return shaper.Cost{}, false
	}
	fi := fragOf(fr.ip)
	if !fi.ok || fi.kind != notFrag {
		return shaper.Cost{}, false
	}
	hdr := int64(fi.l4off)
	switch fi.proto {
	case 17, 136:
		hdr += 8
	case 6:
		if at := fi.l4off + 12; at < len(fr.ip) {
			hdr += int64(fr.ip[at]>>4) * 4
		}
	}
	hdr = min(hdr, fi.length)
	segs := int64(fr.gsoSegs)
	if segs <= 0 {
		segs = (fi.length - hdr + int64(fr.gsoSize) - 1) / int64(fr.gsoSize)
	}
	if segs <= 1 {
		return shaper.Cost{}, false
	}
	segs = min(segs, 65535)
	hdr = max(hdr, fi.length-segs*int64(fr.gsoSize))
	return shaper.Cost{Set: true, Packets: segs, Bytes: fi.length + (segs-1)*hdr, Need: shaper.NeedCapped}, true
}

// makeGSO makes fr a GSO packet: its IP header states the length of
// several segments of a random gso_size (the frame's bytes stay what they
// are: the program reads the headers only), gso_segs set or left 0.
func makeGSO(fr *frame, r *rand.Rand) {
	ip := fr.ip
	fi := fragOf(ip)
	if !fi.ok || fi.kind != notFrag {
		return
	}
	if fi.proto == 6 && fi.l4off+12 < len(ip) {
		ip[fi.l4off+12] = 0x50 // data offset 5: a 20-byte TCP header
	}
	size := uint32(100 + r.IntN(1400))
	segs := 2 + r.IntN(44)
	length := fi.l4off + 20 + (segs-1)*int(size) + 1 + r.IntN(int(size))
	if length > 65535 {
		return
	}
	if ip[0]>>4 == 4 {
		binary.BigEndian.PutUint16(ip[2:], uint16(length))
	} else {
		binary.BigEndian.PutUint16(ip[4:], uint16(length-40))
	}
	fr.gsoSize = size
	if r.IntN(3) != 0 {
		fr.gsoSegs = uint32(segs)
	}
}

// fragment cuts the IP packet ip (no extension headers) into fragments of
// at most mtu bytes of IP packet, datagram id id: IPv4 fragments, or IPv6
// ones behind a fragment header.
func fragment(ip []byte, mtu int, id uint32) [][]byte {
	var out [][]byte
	if ip[0]>>4 == 4 {
		ihl := int(ip[0]&0x0f) * 4
		data := ip[ihl:]
		step := (mtu - ihl) &^ 7
		for off := 0; off < len(data); off += step {
			n := min(step, len(data)-off)
			b := make([]byte, ihl+n)
			copy(b, ip[:ihl])
			copy(b[ihl:], data[off:off+n])
			binary.BigEndian.PutUint16(b[2:], uint16(ihl+n))
			binary.BigEndian.PutUint16(b[4:], uint16(id))
			fo := uint16(off / 8)
			if off+n < len(data) {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(b[6:], fo)
			out = append(out, b)
		}
		return out
	}
	data := ip[40:]
	step := (mtu - 48) &^ 7
	for off := 0; off < len(data); off += step {
		n := min(step, len(data)-off)
		b := make([]byte, 48+n)
		copy(b, ip[:40])
		b[6] = 44
		binary.BigEndian.PutUint16(b[4:], uint16(8+n))
		h := b[40:48]
		h[0] = ip[6]
		fo := uint16(off/8) << 3
		if off+n < len(data) {
			fo |= 1
		}
		binary.BigEndian.PutUint16(h[2:], fo)
		binary.BigEndian.PutUint32(h[4:], id)
		copy(b[48:], data[off:off+n])
		out = append(out, b)
	}
	return out
}

// withChain puts a chain of n extension headers (hop-by-hop, routing,
// destination options of 8 or 16 bytes, AH of 16; an atomic fragment
// header now and then) between the IPv6 packet ip's header and what follows
// it.
func withChain(ip []byte, n int, r *rand.Rand) []byte {
	var chain []byte
	next := ip[6]
	types := []byte{0, 43, 60, 51, 44}
	hdrs := make([]byte, n)
	for i := range hdrs {
		hdrs[i] = types[r.IntN(len(types))]
		if hdrs[i] == 44 && r.IntN(4) != 0 {
			hdrs[i] = 60
		}
	}
	for i, t := range hdrs {
		nx := next
		if i+1 < n {
			nx = hdrs[i+1]
		}
		h := make([]byte, 8)
		switch {
		case t == 51:
			h = make([]byte, 16)
			h[1] = 2 // (2 + 2) x 4 bytes
		case t == 44:
			binary.BigEndian.PutUint32(h[4:], r.Uint32()) // offset 0, no more fragments
		case r.IntN(8) == 0:
			h = make([]byte, 16)
			h[1] = 1 // (1 + 1) x 8 bytes
		}
		h[0] = nx
		chain = append(chain, h...)
	}
	b := make([]byte, 0, len(ip)+len(chain))
	b = append(b, ip[:40]...)
	b = append(b, chain...)
	b = append(b, ip[40:]...)
	b[6] = hdrs[0]
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	return b
}

// ethFrame puts an IP packet behind an Ethernet header of its version's
// ethertype.
func ethFrame(ip []byte, mark uint32) frame {
	b := make([]byte, 14+len(ip))
	et := uint16(0x0800)
	if ip[0]>>4 == 6 {
		et = 0x86dd
	}
	binary.BigEndian.PutUint16(b[12:], et)
	copy(b[14:], ip)
	return frame{b: b, ip: b[14:], mark: mark}
}

// fragTraffic is synthetic fragmented traffic for the mixed policy:
// datagrams of its rules' flows (UDP to the limits and the drop rule,
// TCP, ICMP, both families) cut into fragments of random sizes, each
// datagram's fragments in order but interleaved with another's; some with a
// later fragment sent before its first (user space), some with a later
// fragment sent twice, some ids reused; whole packets between them.
func fragTraffic(n int, seed uint64) ([]frame, []int64) {
	r := rand.New(rand.NewPCG(seed, 2))
	a := netip.MustParseAddr
	fl := []flowDesc{
		{a("10.1.0.1"), a("10.8.0.1"), 17, 40000, 5000},
		{a("10.1.0.2"), a("10.8.0.1"), 17, 40001, 6000},
		{a("10.1.0.9"), a("10.8.0.1"), 17, 999, 53},
		{a("10.1.2.1"), a("10.8.0.2"), 6, 41000, 443},
		{a("10.5.0.1"), a("10.2.0.1"), 17, 1000, 2000},
		{a("10.5.1.1"), a("10.3.0.1"), 6, 1000, 80},
		{a("10.5.2.1"), a("10.4.0.1"), 17, 1000, 81},
		{a("10.9.1.1"), a("10.8.0.1"), 1, 77, 77},
		{a("10.6.0.1"), a("10.7.0.1"), 17, 3000, 3001},
		{a("fd00:1::1"), a("fd00:2::1"), 17, 4000, 6000},
		{a("fd00:1::2"), a("fd00:2::1"), 17, 4000, 5050},
		{a("fd00:3::1"), a("fd00:2::1"), 6, 4000, 80},
		{a("fd00:3::2"), a("fd00:2::2"), 58, 9, 9},
	}
	var frames []frame
	var times []int64
	now := int64(1_700_000_000_000_000_000)
	var pending [][]byte // the fragments of the datagram being interleaved
	id := uint32(1)
	for len(frames) < n {
		f := fl[r.IntN(len(fl))]
		ip := build(f, 60+r.IntN(3000))[14:]
		mark := uint32(0)
		if r.IntN(10) == 0 {
			mark = uint32(r.IntN(4))
		}
		var out [][]byte
		if r.IntN(5) == 0 {
			out = [][]byte{ip} // a whole packet
		} else {
			if r.IntN(20) != 0 {
				id++
			}
			out = fragment(ip, 200+r.IntN(1300), id)
			if f.src.Is6() && r.IntN(6) == 0 {
				// Behind a chain longer than the program's first
				// walk (MAX_EXT), the fragment header last.
				hdrs, seed := 33+r.IntN(60), r.Uint64()
				for i := range out {
					out[i] = withChain(out[i], hdrs, rand.New(rand.NewPCG(seed, 3)))
				}
			}
			switch {
			case len(out) > 1 && r.IntN(15) == 0:
				out[0], out[1] = out[1], out[0] // a later fragment first
			case len(out) > 1 && r.IntN(10) == 0:
				out = append(out, out[len(out)-1]) // sent twice
			}
		}
		for _, b := range out {
			if len(pending) > 0 && r.IntN(2) == 0 {
				frames = append(frames, ethFrame(pending[0], mark))
				pending = pending[1:]
				times = append(times, now)
			}
			frames = append(frames, ethFrame(b, mark))
			now += int64(r.IntN(3_000_000))
			times = append(times, now)
		}
		for _, b := range pending {
			frames = append(frames, ethFrame(b, mark))
			times = append(times, now)
		}
		pending = nil
		if len(out) > 2 && r.IntN(3) == 0 {
			pending = out[len(out)-1:]
		}
	}
	return frames[:n], times[:n]
}

// TestAgreementFragments runs fragmented traffic through the program and
// the engine as compare does, with the agreement of fragment sequences
// defined above: 100 %, and the traffic exercised fragments decided in the
// kernel, later fragments without their first sent to user space, drops.
func TestAgreementFragments(t *testing.T) {
	f := mixed()
	s, p, eng := bothPaths(t, f)
	frames, times := fragTraffic(20000, 11)
	res := agreeAll(t, p, &s, eng, frames, times, newFragMirror())
	if res.frags < res.n/2 || res.drops == 0 || res.punted == 0 {
		t.Errorf("the traffic exercised too little: %v", res)
	}
}

// l3Traffic is synthetic traffic as an L3 device delivers it: frames that
// start at the IP header. BPF_PROG_TEST_RUN takes every tc frame as
// Ethernet (eth_type_trans sets skb->protocol from bytes 12-13), so the
// sources are chosen for those bytes to read as the ethertype of their
// family: 8.0.x.x for IPv4 (source address bytes 0-1), x:x:86dd:... for
// IPv6 (source bytes 4-5); skb->protocol is then what an L3 device sets.
func l3Traffic(n int, seed uint64) ([]frame, []int64) {
	r := rand.New(rand.NewPCG(seed, 3))
	a := netip.MustParseAddr
	var fl []flowDesc
	for i := range 4 {
		s := itoa(i + 1)
		fl = append(fl,
			flowDesc{a("8.0.1." + s), a("10.8.0.1"), 17, 1000, 53},
			flowDesc{a("8.0.2." + s), a("10.2.0.1"), 17, 1000, 2000},
			flowDesc{a("8.0.3." + s), a("10.3.0.1"), 6, 1000, 80},
			flowDesc{a("8.0.4." + s), a("10.4.0.1"), 17, 1000, 81},
			flowDesc{a("8.0.5." + s), a("10.6.0.1"), 1, 5, 5},
			flowDesc{a("fd00:1:86dd::" + s), a("fd00:2::1"), 17, 4000, 5050},
			flowDesc{a("fd00:4:86dd::" + s), a("fd00:2::1"), 6, 4000, 80},
		)
	}
	var frames []frame
	var times []int64
	now := int64(1_700_000_000_000_000_000)
	for len(frames) < n {
		f := fl[r.IntN(len(fl))]
		for range 1 + r.IntN(30) {
			// At least 54 bytes: the test run wants a whole IP
			// header behind the 14 bytes it takes as Ethernet.
			ip := build(f, 64+r.IntN(1400))[14:]
			fr := frame{b: ip, ip: ip, l3: true}
			if r.IntN(10) == 0 {
				makeGSO(&fr, r)
			}
			frames = append(frames, fr)
			now += int64(r.IntN(2_000_000))
			times = append(times, now)
		}
	}
	return frames[:n], times[:n]
}

// TestAgreementL3 runs L3 frames through the L3 entry point (fastpath_l3)
// and the engine: 100 %, with drops and limits. The Ethernet entry point
// reads the same frames at offset 14, as garbage (see TestL3Garbage).
func TestAgreementL3(t *testing.T) {
	f := mixed()
	s, p, eng := bothPaths(t, f)
	frames, times := l3Traffic(10000, 5)
	res := agreeAll(t, p, &s, eng, frames, times, nil)
	if res.drops == 0 || res.kernel < res.n/2 {
		t.Errorf("the traffic exercised too little: %v", res)
	}
}

// TestL3Garbage: what the L3 entry point fixes. A drop rule's L3 frames
// are dropped by fastpath_l3 and not by the Ethernet entry point, which
// reads them from offset 14 (on a tun device before: "src 232.176.0.0",
// never limited).
func TestL3Garbage(t *testing.T) {
	f := &policy.File{Rules: []policy.Rule{{Name: "blocked", Action: "drop", Match: &policy.Match{Src: []string{"8.0.0.0/16"}}}}}
	p, _ := loadPolicy(t, f)
	ip := build(flowDesc{netip.MustParseAddr("8.0.1.1"), netip.MustParseAddr("10.8.0.1"), 17, 1000, 2000}, 200)[14:]
	l3 := frame{b: ip, ip: ip, l3: true}
	if ret, _, _ := run(t, p, &l3, 1); ret != tcShot {
		t.Errorf("fastpath_l3: verdict %d for a blocked source's frame, want drop", ret)
	}
	eth := frame{b: ip, ip: ip}
	if ret, _, _ := run(t, p, &eth, 1); ret != tcOK {
		t.Errorf("fastpath (Ethernet) on an L3 frame: verdict %d, want the garbage passed", ret)
	}
}

// kernelPending is the data of fi's datagram's later fragments the
// program's fragment map holds (an entry without a first fragment), as
// frag.h charges it with the first fragment (at most PENDING_MAX). Read
// from the map: its LRU may evict such an entry, which the mirror cannot
// foresee.
func (p *Program) kernelPending(t testing.TB, fi fragInfo) int64 {
	t.Helper()
	v, ok := p.fragEntry(t, fi)
	if !ok || binary.LittleEndian.Uint32(v[76:]) != 0 {
		return 0
	}
	return min(int64(binary.LittleEndian.Uint64(v[80:])), 1<<20)
}

// kernelFirst reports whether the program's fragment map (frag.h frags)
// holds the first fragment of fi's datagram: a BPF LRU map may evict
// before it is full (its free lists are per CPU), which the mirror cannot
// foresee, so a later fragment the program sent to user space while the
// mirror holds its first is checked against the map itself.
func (p *Program) kernelFirst(t testing.TB, fi fragInfo) bool {
	t.Helper()
	v, ok := p.fragEntry(t, fi)
	return ok && binary.LittleEndian.Uint32(v[76:]) != 0 // frag_val.first
}

// fragEntry reads fi's datagram's entry of the program's fragment map.
func (p *Program) fragEntry(t testing.TB, fi fragInfo) ([]byte, bool) {
	t.Helper()
	m := p.objs.Frags
	if m.KeySize() != 40 || m.ValueSize() != 88 {
		t.Fatalf("frag.h's frag_key or frag_val changed (%d, %d bytes): update kernelFirst", m.KeySize(), m.ValueSize())
	}
	k := make([]byte, 40)
	copy(k[0:], fi.key.src[:])
	copy(k[16:], fi.key.dst[:])
	if fi.key.family == 4 {
		binary.LittleEndian.PutUint32(k[32:], uint32(fi.key.id[0])<<8|uint32(fi.key.id[1]))
	} else {
		copy(k[32:36], fi.key.id[:])
	}
	k[36], k[37] = fi.key.family, fi.key.proto
	v := make([]byte, 88)
	if err := m.Lookup(k, v); err != nil {
		return nil, false
	}
	return v, true
}
