//go:build linux

package fastpath

import (
	"encoding/binary"
	"math/rand/v2"

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
//     fragment's verdict).
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

// fragMirror is the program's fragment map as the test knows it.
type fragMirror struct{ m map[fragKey]fragFirst }

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
	i := 0
	for ; i < maxExt; i++ {
		if !isExt(next) {
			break
		}
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
				fi.kind, fi.charge = firstFrag, int64(length-8)
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
	if i == maxExt && isExt(next) {
		fi.ok = false // over the walk: user space
		return fi
	}
	fi.proto, fi.l4off = next, off
	return fi
}

// gsoCost is decode.h's gso_cost for a frame with gso_size set: the cost of
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
