package main

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestHBHZeroPacket: send6hbh's packet is an IPv6 header with payload
// length 0 and next header hop-by-hop, an 8-byte hop-by-hop header leading
// to UDP, and a UDP header with its true length and a checksum that sums
// to zero over the pseudo-header.
func TestHBHZeroPacket(t *testing.T) {
	src, dst := netip.MustParseAddr("fd00:213::1"), netip.MustParseAddrPort("[fd00:213::2]:9000")
	payload := make([]byte, 1344)
	for i := range payload {
		payload[i] = byte(i)
	}
	b := hbhZeroPacket(src, dst, 10000, payload)
	if len(b) != 1400 {
		t.Fatalf("packet of %d bytes, want 1400", len(b))
	}
	if b[0]>>4 != 6 || binary.BigEndian.Uint16(b[4:]) != 0 || b[6] != protoHopByHop {
		t.Errorf("IPv6 header %x: want version 6, payload length 0, next header 0", b[:8])
	}
	if b[40] != protoUDP || b[41] != 0 || b[42] != 1 || b[43] != 4 {
		t.Errorf("hop-by-hop header %x: want next UDP, length 0, PadN of 4", b[40:48])
	}
	udp := b[48:]
	if binary.BigEndian.Uint16(udp[0:]) != 10000 || binary.BigEndian.Uint16(udp[2:]) != 9000 || binary.BigEndian.Uint16(udp[4:]) != uint16(len(udp)) {
		t.Errorf("UDP header %x: want ports 10000 → 9000 and length %d", udp[:8], len(udp))
	}
	sum := binary.BigEndian.Uint16(udp[6:])
	c := append([]byte(nil), udp...)
	c[6], c[7] = 0, 0
	if want := udp6Checksum(src, dst.Addr(), c); sum != want {
		t.Errorf("UDP checksum %#04x, want %#04x", sum, want)
	}
}

func TestSend6hbhBadFlags(t *testing.T) {
	wantUsageErrors(t, "send6hbh", runSend6hbh, [][]string{
		{"--dst", "127.0.0.1:9", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01"},
		{"--dst", "[::1]:9", "--dst-mac", "02:00:00:00:00:01"},
		{"--dst", "[::1]:9", "--iface", "lo"},
		{"--dst", "[::1]:9", "--iface", "lo", "--dst-mac", "nonsense"},
		{"--dst", "[::1]:9", "--iface", "no-such-device0", "--dst-mac", "02:00:00:00:00:01"},
		{"--dst", "[::1]:9", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01", "--pps", "0", "--count", "1"},
		{"--dst", "[::1]:9", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01", "--size", "65500"},
		{"--dst", "[::1]:9", "--iface", "lo", "--dst-mac", "02:00:00:00:00:01", "--seq"},
	})
	wantUsageErrors(t, "send", runSend, [][]string{
		{"--dst", "127.0.0.1:9", "--size", "65508"},
		{"--dst", "127.0.0.1:9", "--size", "-1"},
	})
	if _, err := runSend6x(context.Background(), []string{"--dst", "[::1]:9", "--size", "65500", "--dstopt-len", "64"}); err == nil {
		t.Errorf("send6x: --size 65500 with 64 bytes of headers: no error")
	}
}
