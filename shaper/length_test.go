package shaper

import (
	"encoding/binary"
	"testing"
)

// hbh6Zero is an IPv6 UDP packet of n bytes from 2001:db8::1:5000 to
// 2001:db8::2:9000 whose payload length is 0, behind an 8-byte hop-by-hop
// header: the kernel does not trim it and delivers all n bytes.
func hbh6Zero(n int) []byte {
	b := make([]byte, n)
	b[0] = 0x60
	b[6], b[7] = 0, 64
	copy(b[8:24], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	copy(b[24:40], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
	b[40], b[42], b[43] = 17, 1, 4
	binary.BigEndian.PutUint16(b[48:], 5000)
	binary.BigEndian.PutUint16(b[50:], 9000)
	binary.BigEndian.PutUint16(b[52:], uint16(n-48))
	return b
}

// TestDecideChargesRealLength: with a byte rate, a packet costs its real
// length (Meta.Len, the kernel's) whatever was copied of it and whatever
// its header says when that is 0 or disagrees: a burst of 15000 bytes lets
// 10 packets of 1400 bytes through at one instant, not one per 64 or 256
// bytes copied.
func TestDecideChargesRealLength(t *testing.T) {
	const burst, size = 15000, 1400
	v4 := udp(1, 1000, size-28)
	v4zero := append([]byte(nil), v4...)
	binary.BigEndian.PutUint16(v4zero[2:], 0) // big TCP style
	v4short := append([]byte(nil), v4...)
	binary.BigEndian.PutUint16(v4short[2:], 100) // says less than the kernel
	for _, tc := range []struct {
		name string
		pkt  []byte
		len  int
		want int
	}{
		{"ipv6 payload length 0 behind hop-by-hop, copy range 64", hbh6Zero(size)[:64], size, burst / size},
		{"ipv6 payload length 0 behind hop-by-hop, copy range 256", hbh6Zero(size)[:256], size, burst / size},
		{"ipv6 payload length 0, 9000-byte packet, copy range 64", hbh6Zero(size)[:64], 9000, 1},
		{"ipv4 total length 0, copy range 64", v4zero[:64], size, burst / size},
		{"ipv4 header length below the kernel's", v4short[:64], size, burst / size},
		{"ipv4 consistent, copy range 64", v4[:64], size, burst / size},
		{"ipv4 consistent, length unknown (0)", v4[:64], 0, burst / size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustNew(t, Config{Rate: 1000, Bytes: true, Burst: burst})
			m := Meta{Len: tc.len}
			var d Decision
			n := 0
			for range 100 {
				e.DecidePacket(tc.pkt, &m, t0, &d)
				if d.Verdict == Accept {
					n++
				}
			}
			if n != tc.want {
				t.Errorf("%d of 100 packets accepted at one instant, want %d (burst %d bytes, real length %d)", n, tc.want, burst, tc.len)
			}
		})
	}
}

// TestDecideRealLengthNoAllocs: DecidePacket with Meta.Len set does not
// allocate.
func TestDecideRealLengthNoAllocs(t *testing.T) {
	e := mustNew(t, Config{Rate: 1e9, Bytes: true})
	pkt := hbh6Zero(1400)[:64]
	m := Meta{Len: 1400}
	var d Decision
	now := t0
	e.DecidePacket(pkt, &m, now, &d)
	if n := testing.AllocsPerRun(1000, func() {
		now += 1000
		e.DecidePacket(pkt, &m, now, &d)
	}); n != 0 {
		t.Errorf("DecidePacket: %v allocs, want 0", n)
	}
}
