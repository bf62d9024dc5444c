package flows

import (
	"encoding/binary"
	"testing"
)

// hbh6Zero is an IPv6 UDP packet of n bytes in all whose payload length is
// 0, behind an 8-byte hop-by-hop header (no jumbo option): the kernel does
// not trim such a packet and delivers all n bytes.
func hbh6Zero(n int) []byte {
	b := make([]byte, n)
	b[0] = 0x60
	b[6], b[7] = 0, 64 // next header: hop-by-hop
	copy(b[8:24], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	copy(b[24:40], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
	b[40], b[41] = ProtoUDP, 0 // hop-by-hop: next UDP, 8 bytes
	b[42], b[43] = 1, 4        // PadN of 4 zero bytes
	binary.BigEndian.PutUint16(b[48:], 5000)
	binary.BigEndian.PutUint16(b[50:], 9000)
	binary.BigEndian.PutUint16(b[52:], uint16(n-48))
	return b
}

// TestDecodeLength: the length charged is the packet's real length — the IP
// header's when set and consistent with the source's, else the source's (the
// kernel's packet length), never the number of bytes copied.
func TestDecodeLength(t *testing.T) {
	v4 := udp4(t, "10.0.0.1", "10.0.0.2", 5000, 9000, 1372) // 1400 bytes
	v4zero := append([]byte(nil), v4...)
	v4zero[2], v4zero[3] = 0, 0 // big TCP style: total length 0
	v6 := ext6(t, []uint8{60}, 5000, 9000, 0)
	v6len := len(v6)
	hbh := hbh6Zero(1400)

	tests := []struct {
		name     string
		b        []byte
		wire     int
		want     int
		wantPort uint16 // the destination port still read (0: none expected)
	}{
		{"ipv4, length unknown: the header's", v4, 0, 1400, 9000},
		{"ipv4, consistent: the header's", v4, 1400, 1400, 9000},
		{"ipv4 cut by the copy range, length unknown: the header's", v4[:64], 0, 1400, 9000},
		{"ipv4 cut by the copy range, consistent: the header's", v4[:64], 1400, 1400, 9000},
		{"ipv4 header length 0: the source's", v4zero[:64], 1400, 1400, 9000},
		{"ipv4 header length 0, unknown: the bytes given", v4zero[:64], 0, 64, 9000},
		{"ipv4 header says less than the kernel: the kernel's", v4[:64], 9000, 9000, 9000},
		{"ipv4 header says more than the kernel: the kernel's", v4[:64], 700, 700, 9000},
		{"ipv4 source length below the bytes given: the bytes'", v4zero, 100, 1400, 9000},
		{"ipv6, consistent: the header's", v6, v6len, v6len, 9000},
		{"ipv6 header says less than the kernel: the kernel's", v6, 4 * v6len, 4 * v6len, 9000},
		{"ipv6 payload length 0 behind hop-by-hop, copy range 64: the kernel's", hbh[:64], 1400, 1400, 9000},
		{"ipv6 payload length 0 behind hop-by-hop, copy range 256: the kernel's", hbh[:256], 1400, 1400, 9000},
		{"ipv6 payload length 0 behind hop-by-hop, jumbo size: the kernel's", hbh[:64], 9000, 9000, 9000},
		{"ipv6 payload length 0, unknown: the bytes given", hbh[:64], 0, 64, 9000},
		{"malformed: the source's length", []byte{0x45, 0}, 1400, 1400, 0},
		{"malformed, unknown: the bytes given", []byte{0x45, 0}, 0, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			p.DecodeLen(tt.b, tt.wire)
			if p.Length != tt.want {
				t.Errorf("DecodeLen(%d bytes, wire %d): Length %d, want %d", len(tt.b), tt.wire, p.Length, tt.want)
			}
			if p.DstPort != tt.wantPort {
				t.Errorf("DecodeLen(%d bytes, wire %d): DstPort %d, want %d (%+v)", len(tt.b), tt.wire, p.DstPort, tt.wantPort, p)
			}
			if tt.wire == 0 {
				var q Packet
				q.Decode(tt.b)
				if q != p {
					t.Errorf("Decode = %+v, DecodeLen(b, 0) = %+v", q, p)
				}
			}
		})
	}
}

// TestDecodeLenPortsWithinHeader: a source length beyond the header's never
// lets ports be read from bytes past the header's stated length.
func TestDecodeLenPortsWithinHeader(t *testing.T) {
	b := udp4(t, "10.0.0.1", "10.0.0.2", 5000, 9000, 0)
	b = append(b[:20:20], 0xaa, 0xbb, 0xcc, 0xdd) // bytes past the header's length
	binary.BigEndian.PutUint16(b[2:], 20)         // total length: the header alone
	var p Packet
	p.DecodeLen(b, 1400)
	if p.Length != 1400 || !p.NoPorts || p.SrcPort != 0 || p.DstPort != 0 {
		t.Errorf("DecodeLen = %+v, want Length 1400, NoPorts and no ports", p)
	}
}

func TestDecodeLenNoAllocs(t *testing.T) {
	b := hbh6Zero(1400)[:64]
	var p Packet
	if n := testing.AllocsPerRun(1000, func() { p.DecodeLen(b, 1400) }); n != 0 {
		t.Errorf("DecodeLen: %v allocs, want 0", n)
	}
}

// FuzzDecodeLen: DecodeLen never panics, charges at least what it was given
// and the source's length when the header's is 0, and finds what Decode
// finds but the length.
func FuzzDecodeLen(f *testing.F) {
	f.Add(hbh6Zero(200), 1400)
	f.Add(udp4(f, "10.0.0.1", "10.0.0.2", 1, 2, 8), 0)
	f.Add(ext6(f, []uint8{0, 44}, 1, 2, 0), 9000)
	f.Fuzz(func(t *testing.T, b []byte, wire int) {
		var p, q Packet
		p.DecodeLen(b, wire)
		q.Decode(b)
		if p.Length < len(b) && p.Length < q.Length {
			t.Fatalf("Length %d below both the bytes given (%d) and the header's (%d)", p.Length, len(b), q.Length)
		}
		// (An IPv4 header longer than the packet is charged at least its
		// header length.)
		if wire > len(b) && p.Length != wire && p.Length != q.Length && !(p.Class == IPv4 && p.Length == int(b[0]&0xf)*4) {
			t.Fatalf("Length %d: neither the source's %d nor the header's %d", p.Length, wire, q.Length)
		}
		if p.Length != q.Length {
			// Reply is a function of the real length too (a TCP
			// segment whose length ends with its header): it follows
			// the length each found.
			p.Reply, q.Reply = false, false
		}
		p.Length, q.Length = 0, 0
		if p != q {
			t.Fatalf("DecodeLen %+v, Decode %+v: they differ beyond Length", p, q)
		}
	})
}
