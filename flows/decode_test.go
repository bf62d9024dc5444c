package flows

import (
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func addr(s string) [16]byte {
	a := netip.MustParseAddr(s)
	var b [16]byte
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
	} else {
		b = a.As16()
	}
	return b
}

func TestDecode(t *testing.T) {
	sctp := serialize(t, ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolSCTP),
		&layers.SCTP{SrcPort: 3868, DstPort: 3869, VerificationTag: 1})
	udplite := serialize(t, ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolUDPLite),
		gopacket.Payload([]byte{0x13, 0x88, 0x23, 0x28, 0, 8, 0, 0}))
	gre := serialize(t, ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolGRE), gopacket.Payload([]byte{0, 0, 8, 0}))
	unreach := serialize(t, ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort)},
		gopacket.Payload(make([]byte, 28)))
	nonext := serialize(t, ip6("2001:db8::1", "2001:db8::2", layers.IPProtocolNoNextHeader))

	tests := []struct {
		name string
		b    []byte
		want Packet
	}{
		{"ipv4 udp", udp4(t, "10.0.0.1", "10.0.0.2", 5000, 9000, 64),
			Packet{Class: IPv4, Proto: ProtoUDP, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), SrcPort: 5000, DstPort: 9000, Length: 20 + 8 + 64}},
		{"ipv4 tcp", tcp4(t, "192.0.2.7", "198.51.100.9", 40000, 443),
			Packet{Class: IPv4, Proto: ProtoTCP, Src: addr("192.0.2.7"), Dst: addr("198.51.100.9"), SrcPort: 40000, DstPort: 443, Length: 40}},
		{"ipv4 icmp echo: identifier stands for both ports", icmp4Echo(t, "10.0.0.1", "10.0.0.2", 0x4242, 1),
			Packet{Class: IPv4, Proto: ProtoICMP, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), SrcPort: 0x4242, DstPort: 0x4242, Length: 20 + 8 + 56}},
		{"ipv4 icmp error: type<<8|code stands for the source port", unreach,
			Packet{Class: IPv4, Proto: ProtoICMP, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), SrcPort: 3<<8 | 3, Reply: true, Length: 20 + 8 + 28}},
		{"ipv4 sctp", sctp,
			Packet{Class: IPv4, Proto: ProtoSCTP, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), SrcPort: 3868, DstPort: 3869, Length: 32}},
		{"ipv4 udp-lite", udplite,
			Packet{Class: IPv4, Proto: ProtoUDPLite, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), SrcPort: 5000, DstPort: 9000, Length: 28}},
		{"ipv4 gre: addresses and protocol only", gre,
			Packet{Class: IPv4, Proto: 47, Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Length: 24}},
		{"ipv6 udp", udp6(t, "2001:db8::1", "2001:db8::2", 5353, 53),
			Packet{Class: IPv6, Proto: ProtoUDP, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 5353, DstPort: 53, Length: 40 + 8 + 5}},
		{"ipv6 tcp", tcp6(t, "2001:db8::a", "2001:db8::b", 1234, 22),
			Packet{Class: IPv6, Proto: ProtoTCP, Src: addr("2001:db8::a"), Dst: addr("2001:db8::b"), SrcPort: 1234, DstPort: 22, Reply: true, Length: 60}},
		{"ipv6 icmpv6 echo reply", icmp6Echo(t, "2001:db8::1", "2001:db8::2", 7, 1, true),
			Packet{Class: IPv6, Proto: ProtoICMPv6, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 7, DstPort: 7, Length: 48}},
		{"ipv6 no next header", nonext,
			Packet{Class: IPv6, Proto: 59, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Length: 40}},
		{"ipv6 hop-by-hop, routing, destination options", ext6(t, []uint8{0, 43, 60}, 1000, 2000, 0),
			Packet{Class: IPv6, Proto: ProtoUDP, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 1000, DstPort: 2000, Length: 40 + 48 + 12}},
		{"ipv6 first fragment has ports", ext6(t, []uint8{0, 44}, 1000, 2000, 0),
			Packet{Class: IPv6, Proto: ProtoUDP, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 1000, DstPort: 2000, Length: 40 + 24 + 12}},
		{"ipv6 later fragment has none", ext6(t, []uint8{60, 44}, 1000, 2000, 100),
			Packet{Class: IPv6, Proto: ProtoUnknown, Fragment: true, NoPorts: true, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Length: 40 + 24 + 27}},
		{"ipv4 first fragment has ports", frag4(t, 0, []byte{0x13, 0x88, 0x23, 0x28, 0, 100, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}),
			Packet{Class: IPv4, Proto: ProtoUDP, Src: addr("192.0.2.1"), Dst: addr("192.0.2.2"), SrcPort: 5000, DstPort: 9000, Length: 36}},
		{"ipv4 later fragment has none", frag4(t, 2, []byte{0x13, 0x88, 0x23, 0x28, 0, 100, 0, 0}),
			Packet{Class: IPv4, Proto: ProtoUDP, Fragment: true, NoPorts: true, Src: addr("192.0.2.1"), Dst: addr("192.0.2.2"), Length: 28}},
		{"ipv6 16 destination options headers are walked", ext6(t, []uint8{60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60}, 1000, 53, 0),
			Packet{Class: IPv6, Proto: ProtoUDP, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 1000, DstPort: 53, Length: 40 + 16*16 + 12}},
		{"ipv6 100 extension headers are walked", ext6(t, make([]uint8, 100), 1000, 53, 0),
			Packet{Class: IPv6, Proto: ProtoUDP, Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), SrcPort: 1000, DstPort: 53, Length: 40 + 100*16 + 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			p.Decode(tt.b)
			if p != tt.want {
				t.Errorf("Decode =\n%+v, want\n%+v", p, tt.want)
			}
			// Every truncation decodes without panicking: one that
			// cuts the fixed IP header is malformed, and any other
			// keeps its class and addresses and has either the right
			// ports or none (NoPorts, keyed by address and protocol).
			fixed := 20
			if tt.want.Class == IPv6 {
				fixed = 40
			}
			for n := 0; n < len(tt.b); n++ {
				var q Packet
				q.Decode(tt.b[:n])
				if n < fixed {
					if q.Class != Malformed {
						t.Errorf("Decode(first %d bytes).Class = %v, want malformed", n, q.Class)
					}
					continue
				}
				if q.Class != tt.want.Class || q.Src != tt.want.Src || q.Dst != tt.want.Dst {
					t.Errorf("Decode(first %d bytes) = %+v, want class %v and the addresses", n, q, tt.want.Class)
				}
				switch {
				case q.NoPorts:
					if q.SrcPort != 0 || q.DstPort != 0 {
						t.Errorf("Decode(first %d bytes): NoPorts with ports %d,%d", n, q.SrcPort, q.DstPort)
					}
					if q.Proto != tt.want.Proto && q.Proto != ProtoUnknown {
						t.Errorf("Decode(first %d bytes): NoPorts with proto %d, want %d or unknown", n, q.Proto, tt.want.Proto)
					}
				case q.SrcPort != tt.want.SrcPort || q.DstPort != tt.want.DstPort || q.Proto != tt.want.Proto:
					t.Errorf("Decode(first %d bytes) proto %d ports %d,%d, want %d %d,%d or NoPorts", n, q.Proto, q.SrcPort, q.DstPort, tt.want.Proto, tt.want.SrcPort, tt.want.DstPort)
				}
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	// Only bytes that are not a valid IP header are malformed: the kernel
	// drops these before any hook, so they never reach NFQUEUE.
	good := udp4(t, "10.0.0.1", "10.0.0.2", 1, 2, 8)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 5", mod(func(b []byte) []byte { b[0] = 0x55; return b })},
		{"ipv4 header length 16", mod(func(b []byte) []byte { b[0] = 0x44; return b })},
		{"ipv4 total length below header", mod(func(b []byte) []byte { b[2], b[3] = 0, 10; return b })},
		{"ipv4 cut in the fixed header", good[:19]},
		{"ipv6 cut in the fixed header", udp6(t, "2001:db8::1", "2001:db8::2", 1, 2)[:39]},
	}
	for _, tt := range tests {
		var p Packet
		p.Decode(tt.b)
		if p.Class != Malformed {
			t.Errorf("%s: Class = %v, want malformed (%+v)", tt.name, p.Class, p)
		}
		if p.Length != len(tt.b) {
			t.Errorf("%s: Length = %d, want len(b) = %d", tt.name, p.Length, len(tt.b))
		}
	}
}

// TestDecodeNoPorts lists the packets whose IP header is valid but whose
// ports cannot be read: each is keyed by its addresses and protocol
// (NoPorts), never malformed, so --malformed accept cannot let them through
// unlimited (issue 12: 16 destination options headers, or one longer than
// the copy range, were accepted unlimited as malformed).
func TestDecodeNoPorts(t *testing.T) {
	good := udp4(t, "10.0.0.1", "10.0.0.2", 1, 2, 8)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	bigOpt := func() []byte {
		// One 600-byte destination options header, cut at a 256-byte
		// copy range.
		b := ext6(t, []uint8{60}, 1000, 53, 0)
		opt := make([]byte, 600)
		opt[0], opt[1] = 17, 600/8-1
		// PadN options over the rest: 257 + 257 + 84 bytes.
		opt[2], opt[3] = 1, 255
		opt[259], opt[260] = 1, 255
		opt[516], opt[517] = 1, 82
		out := append(append(append([]byte(nil), b[:40]...), opt...), b[48:]...)
		out[4], out[5] = byte((len(out)-40)>>8), byte(len(out)-40)
		return out[:256]
	}()
	tests := []struct {
		name  string
		b     []byte
		class Class
		proto uint8
	}{
		{"ipv4 udp cut before the ports", good[:22], IPv4, ProtoUDP},
		{"ipv4 tiny first fragment", frag4(t, 0, []byte{0x13}), IPv4, ProtoUDP},
		{"ipv4 later fragment", frag4(t, 2, []byte{0x13, 0x88, 0x23, 0x28}), IPv4, ProtoUDP},
		{"ipv4 options past the end of the capture", mod(func(b []byte) []byte { b[0], b[2], b[3] = 0x4f, 0, 100; return b[:40] }), IPv4, ProtoUDP},
		{"ipv4 icmp echo cut before the identifier", icmp4Echo(t, "10.0.0.1", "10.0.0.2", 1, 1)[:26], IPv4, ProtoICMP},
		{"ipv4 total length ends before the ports, padding after", mod(func(b []byte) []byte { b[2], b[3] = 0, 22; return b }), IPv4, ProtoUDP},
		{"ipv6 extension header past the end", ext6(t, []uint8{0, 43}, 1, 2, 0)[:40+20], IPv6, ProtoUnknown},
		// The review's attack: later fragments of a UDP datagram that
		// claim ICMPv6 in their fragment header (the kernel ignores it)
		// must not be taken for ICMPv6.
		{"ipv6 later fragment claiming icmpv6", func() []byte {
			b := ext6(t, []uint8{44}, 1, 2, 100)
			b[40] = ProtoICMPv6
			return b
		}(), IPv6, ProtoUnknown},
		{"ipv6 destination options longer than the copy range", bigOpt, IPv6, ProtoUnknown},
		{"ipv6 payload length ends before the ports, padding after", func() []byte {
			b := udp6(t, "2001:db8::1", "2001:db8::2", 1, 2)
			b[4], b[5] = 0, 2
			return b
		}(), IPv6, ProtoUDP},
	}
	for _, tt := range tests {
		var p Packet
		p.Decode(tt.b)
		if p.Class != tt.class || !p.NoPorts || p.Proto != tt.proto || p.SrcPort != 0 || p.DstPort != 0 {
			t.Errorf("%s: Decode = %+v, want class %v, NoPorts, proto %d, zero ports", tt.name, p, tt.class, tt.proto)
		}
		if p.Src == ([16]byte{}) {
			t.Errorf("%s: no source address", tt.name)
		}
	}
}

func TestDecodeCaptureShorterThanPacket(t *testing.T) {
	// NFQUEUE's copy range or a capture's snaplen cuts the payload: the
	// packet still decodes, and Length is the length on the wire.
	b := udp4(t, "10.0.0.1", "10.0.0.2", 1, 2, 1400)
	var p Packet
	p.Decode(b[:64])
	if p.Class != IPv4 || p.Length != 1428 || p.DstPort != 2 {
		t.Errorf("Decode(first 64 of 1428 bytes) = %+v", p)
	}
}

func TestDecodeNoAllocs(t *testing.T) {
	pkts := [][]byte{
		udp4(t, "10.0.0.1", "10.0.0.2", 1, 2, 8), tcp6(t, "2001:db8::1", "2001:db8::2", 3, 4),
		ext6(t, []uint8{0, 43, 60, 44}, 1, 2, 0), icmp4Echo(t, "10.0.0.1", "10.0.0.2", 1, 1), {0x45},
	}
	var c KeyConfig
	for _, b := range pkts {
		if n := testing.AllocsPerRun(100, func() {
			var p Packet
			p.Decode(b)
			if p.Class != Malformed {
				_ = c.Key(&p)
			}
		}); n != 0 {
			t.Errorf("Decode+Key of %x: %v allocs, want 0", b[:1], n)
		}
	}
}

// FuzzDecode checks that Decode never panics and that what it reports is
// consistent with the bytes: addresses come from where the IP header says,
// ports only for protocols that have them, and Fragment packets carry none.
func FuzzDecode(f *testing.F) {
	f.Add(udp4(f, "10.0.0.1", "10.0.0.2", 1, 2, 8))
	f.Add(tcp6(f, "2001:db8::1", "2001:db8::2", 3, 4))
	f.Add(ext6(f, []uint8{0, 43, 60, 44}, 1, 2, 0))
	f.Add(ext6(f, []uint8{44}, 1, 2, 9))
	f.Add(icmp6Echo(f, "2001:db8::1", "2001:db8::2", 1, 1, false))
	f.Add(frag4(f, 3, []byte{1, 2, 3, 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		p.Decode(b)
		var k KeyConfig
		switch p.Class {
		case Malformed:
			if p.Length != len(b) || p.Proto != 0 || p.SrcPort != 0 {
				t.Fatalf("malformed packet with fields set: %+v", p)
			}
			// Only an invalid IP header is malformed.
			if len(b) >= 40 && b[0]>>4 == 6 {
				t.Fatalf("an IPv6 packet with a whole fixed header decoded as malformed")
			}
			if len(b) >= 20 && b[0]>>4 == 4 && b[0]&0xf >= 5 {
				if tot := int(b[2])<<8 | int(b[3]); tot == 0 || tot >= int(b[0]&0xf)*4 {
					t.Fatalf("an IPv4 packet with a valid header decoded as malformed")
				}
			}
			return
		case IPv4:
			if b[0]>>4 != 4 || [4]byte(b[12:16]) != [4]byte(p.Src[:4]) || [4]byte(b[16:20]) != [4]byte(p.Dst[:4]) {
				t.Fatalf("IPv4 addresses not from the header: %+v", p)
			}
			if p.Proto != b[9] {
				t.Fatalf("Proto %d, header says %d", p.Proto, b[9])
			}
		case IPv6:
			if b[0]>>4 != 6 || [16]byte(b[8:24]) != p.Src || [16]byte(b[24:40]) != p.Dst {
				t.Fatalf("IPv6 addresses not from the header: %+v", p)
			}
		default:
			t.Fatalf("Class %d", p.Class)
		}
		if (p.Fragment || p.NoPorts) && (p.SrcPort != 0 || p.DstPort != 0) {
			t.Fatalf("fragment or NoPorts packet with ports: %+v", p)
		}
		if p.Fragment && hasPorts(p.Proto) && !p.NoPorts {
			t.Fatalf("fragment of a port protocol without NoPorts: %+v", p)
		}
		if !hasPorts(p.Proto) && (p.SrcPort != 0 || p.DstPort != 0) {
			t.Fatalf("ports for protocol %d: %+v", p.Proto, p)
		}
		_ = k.Key(&p).String()
	})
}
