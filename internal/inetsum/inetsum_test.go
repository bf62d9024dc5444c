package inetsum

import "testing"

// TestAdd: RFC 1071 section 3's example (the sum of 00 01 f2 03 f4 f5 f6 f7
// is ddf2), an odd length, chaining, and a real IPv4 header that sums to
// 0xffff with its checksum field.
func TestAdd(t *testing.T) {
	rfc := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if s := Add(rfc, 0); s != 0xddf2 {
		t.Errorf("RFC 1071 example: %#x, want 0xddf2", s)
	}
	if s := Add(rfc[4:], Add(rfc[:4], 0)); s != 0xddf2 {
		t.Errorf("chained: %#x, want 0xddf2", s)
	}
	if s := Add([]byte{0x01, 0x02, 0x03}, 0); s != 0x0402 {
		t.Errorf("odd length: %#x, want 0x0402", s)
	}
	// 192.168.0.1 -> 192.168.0.199, TTL 64, UDP, DF, 115 bytes: checksum b861.
	ip := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if s := Add(ip, 0); s != 0xffff {
		t.Errorf("IPv4 header with its checksum sums to %#x, want 0xffff", s)
	}
	ip[10], ip[11] = 0, 0
	if c := ^Add(ip, 0); c != 0xb861 {
		t.Errorf("IPv4 header checksum %#x, want 0xb861", c)
	}
}
