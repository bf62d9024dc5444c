package flows

import (
	"testing"
)

// keyPackets are the IPv4 and IPv6 UDP packets the key tests key.
func keyPackets(t *testing.T) (p4, p6 Packet) {
	p4.Decode(udp4(t, "10.1.2.3", "10.9.8.7", 5000, 9000, 1))
	p6.Decode(udp6(t, "2001:db8:1:2:aaaa::1", "2001:db8:9:9::2", 5000, 53))
	return p4, p6
}

// keyCase is a key configuration, a packet, and what the test wants of
// the two.
type keyCase struct {
	c    KeyConfig
	p    *Packet
	want string
}

func TestKeyModes(t *testing.T) {
	p4, p6 := keyPackets(t)
	tests := []keyCase{
		{KeyConfig{}, &p4, "udp 10.1.2.3:5000 > 10.9.8.7:9000"},
		{KeyConfig{Mode: Src}, &p4, "src 10.1.2.3"},
		{KeyConfig{Mode: Dst}, &p4, "dst 10.9.8.7"},
		{KeyConfig{Mode: SrcDst}, &p4, "10.1.2.3 > 10.9.8.7"},
		{KeyConfig{Mode: Src, SrcPrefix4: 24}, &p4, "src 10.1.2.0"},
		{KeyConfig{Mode: SrcDst, SrcPrefix4: 8, DstPrefix4: 31}, &p4, "10.0.0.0 > 10.9.8.6"},
		{KeyConfig{SrcPrefix4: 32, DstPrefix4: 32}, &p4, "udp 10.1.2.3:5000 > 10.9.8.7:9000"},
		{KeyConfig{}, &p6, "udp [2001:db8:1:2:aaaa::1]:5000 > [2001:db8:9:9::2]:53"},
		{KeyConfig{Mode: Src, SrcPrefix6: 64}, &p6, "src 2001:db8:1:2::"},
		{KeyConfig{Mode: Src, SrcPrefix6: 60}, &p6, "src 2001:db8:1::"},
		{KeyConfig{Mode: Src, SrcPrefix4: 24}, &p6, "src 2001:db8:1:2:aaaa::1"}, // v4 prefix leaves v6 alone
		{KeyConfig{Symmetric: true}, &p6, "udp [2001:db8:1:2:aaaa::1]:5000 > [2001:db8:9:9::2]:53"},
		{KeyConfig{Symmetric: true, Mode: Dst}, &p4, "dst 10.9.8.7"},
	}
	for _, tt := range tests {
		if got := tt.c.Key(tt.p).String(); got != tt.want {
			t.Errorf("%+v.Key(%v) = %q, want %q", tt.c, tt.p.Class, got, tt.want)
		}
	}
}

func TestKeySymmetric(t *testing.T) {
	var fwd, rev Packet
	fwd.Decode(tcp4(t, "10.0.0.9", "10.0.0.1", 40000, 80))
	rev.Decode(tcp4(t, "10.0.0.1", "10.0.0.9", 80, 40000))
	sym := KeyConfig{Symmetric: true}
	if sym.Key(&fwd) != sym.Key(&rev) {
		t.Errorf("symmetric keys differ: %v and %v", sym.Key(&fwd), sym.Key(&rev))
	}
	var asym KeyConfig
	if asym.Key(&fwd) == asym.Key(&rev) {
		t.Errorf("directions share a key without Symmetric: %v", asym.Key(&fwd))
	}
	// A ping session: request and reply are one flow.
	fwd.Decode(icmp6Echo(t, "2001:db8::9", "2001:db8::1", 77, 1, false))
	rev.Decode(icmp6Echo(t, "2001:db8::1", "2001:db8::9", 77, 1, true))
	if sym.Key(&fwd) != sym.Key(&rev) {
		t.Errorf("symmetric echo keys differ: %v and %v", sym.Key(&fwd), sym.Key(&rev))
	}
	// Same address both ways: the ports decide the order.
	fwd.Decode(udp4(t, "127.0.0.1", "127.0.0.1", 9, 7, 1))
	rev.Decode(udp4(t, "127.0.0.1", "127.0.0.1", 7, 9, 1))
	if sym.Key(&fwd) != sym.Key(&rev) {
		t.Errorf("symmetric keys differ on one address: %v and %v", sym.Key(&fwd), sym.Key(&rev))
	}
}

func TestKeyFamiliesDiffer(t *testing.T) {
	// An IPv4 address and the IPv6 address with the same leading bytes
	// must not share a flow.
	var p4, p6 Packet
	p4.Decode(udp4(t, "32.1.13.184", "0.0.0.0", 1, 1, 1))
	p6.Decode(udp6(t, "2001:db8::", "::", 1, 1))
	c := KeyConfig{Mode: Src, SrcPrefix6: 32}
	if k4, k6 := c.Key(&p4), c.Key(&p6); k4 == k6 {
		t.Errorf("IPv4 and IPv6 share key %v", k4)
	}
}

func TestKeyFragments(t *testing.T) {
	// Policy: a later fragment counts against the address+protocol flow
	// (ports 0), never against a port flow.
	var first, later Packet
	first.Decode(frag4(t, 0, []byte{0x13, 0x88, 0x23, 0x28, 0, 100, 0, 0}))
	later.Decode(frag4(t, 2, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	var c KeyConfig
	if got, want := c.Key(&later).String(), "udp 192.0.2.1:0 > 192.0.2.2:0"; got != want {
		t.Errorf("later fragment key %q, want %q", got, want)
	}
	if c.Key(&first) == c.Key(&later) {
		t.Error("first fragment keyed like later fragments")
	}
	c.Mode = SrcDst
	if c.Key(&first) != c.Key(&later) {
		t.Error("src-dst mode: fragments of one datagram in different flows")
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{FiveTuple, Src, Dst, SrcDst} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("srcip"); err == nil {
		t.Error("ParseMode(srcip) succeeded")
	}
	if err := (&KeyConfig{SrcPrefix6: 129}).Validate(); err == nil {
		t.Error("prefix /129 validated")
	}
	// Symmetric keys order the endpoints after masking: with different
	// prefixes the two directions could not meet.
	if err := (&KeyConfig{Symmetric: true, SrcPrefix4: 24}).Validate(); err == nil {
		t.Error("symmetric with /24 sources and /32 destinations validated")
	}
	if err := (&KeyConfig{Symmetric: true, SrcPrefix4: 24, DstPrefix4: 24, SrcPrefix6: 64, DstPrefix6: 64}).Validate(); err != nil {
		t.Errorf("symmetric with equal prefixes: %v", err)
	}
}

func TestKeyFormat(t *testing.T) {
	p4, p6 := keyPackets(t)
	tests := []keyCase{
		{KeyConfig{}, &p4, "udp 10.1.2.3:5000 > 10.9.8.7:9000"},
		{KeyConfig{Mode: Src, SrcPrefix4: 24}, &p4, "src 10.1.2.0/24"},
		{KeyConfig{Mode: Dst, DstPrefix4: 16}, &p4, "dst 10.9.0.0/16"},
		{KeyConfig{Mode: SrcDst, SrcPrefix4: 8}, &p4, "10.0.0.0/8 > 10.9.8.7"},
		{KeyConfig{SrcPrefix4: 24}, &p4, "udp 10.1.2.0/24:5000 > 10.9.8.7:9000"},
		{KeyConfig{Mode: Src, SrcPrefix6: 64}, &p6, "src 2001:db8:1:2::/64"},
		{KeyConfig{Mode: Src, SrcPrefix4: 24}, &p6, "src 2001:db8:1:2:aaaa::1"},
	}
	for _, tt := range tests {
		if got := tt.c.Format(tt.c.Key(tt.p)); got != tt.want {
			t.Errorf("%+v.Format = %q, want %q", tt.c, got, tt.want)
		}
	}
}
