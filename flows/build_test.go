package flows

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Packet builders for the tests, made with gopacket so that the bytes come
// from an independent implementation of the wire formats.

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func ip4(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
}

func ip6(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
}

func udp4(t testing.TB, src, dst string, sport, dport uint16, payload int) []byte {
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	return overIP(t, ip4(src, dst, layers.IPProtocolUDP), u, make([]byte, payload))
}

func tcp4(t testing.TB, src, dst string, sport, dport uint16) []byte {
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Window: 1024}
	return overIP(t, ip4(src, dst, layers.IPProtocolTCP), tc, nil)
}

func udp6(t testing.TB, src, dst string, sport, dport uint16) []byte {
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	return overIP(t, ip6(src, dst, layers.IPProtocolUDP), u, []byte("hello"))
}

func tcp6(t testing.TB, src, dst string, sport, dport uint16) []byte {
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), ACK: true, Window: 1024}
	return overIP(t, ip6(src, dst, layers.IPProtocolTCP), tc, nil)
}

// overIP is ip, then l4 with its checksum over ip, then payload.
func overIP(t testing.TB, ip interface {
	gopacket.NetworkLayer
	gopacket.SerializableLayer
}, l4 interface {
	SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
	gopacket.SerializableLayer
}, payload []byte) []byte {
	l4.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, l4, gopacket.Payload(payload))
}

func icmp4Echo(t testing.TB, src, dst string, id, seq uint16) []byte {
	return serialize(t, ip4(src, dst, layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: seq},
		gopacket.Payload(make([]byte, 56)))
}

func icmp6Echo(t testing.TB, src, dst string, id, seq uint16, reply bool) []byte {
	ip := ip6(src, dst, layers.IPProtocolICMPv6)
	typ := uint8(layers.ICMPv6TypeEchoRequest)
	if reply {
		typ = layers.ICMPv6TypeEchoReply
	}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	ic.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, ic, &layers.ICMPv6Echo{Identifier: id, SeqNumber: seq})
}

// ext6 builds an IPv6 packet whose UDP header follows the given chain of
// extension headers, written by hand (gopacket does not serialize them all):
// each entry is a header type from hop-by-hop (0), routing (43),
// destination options (60) and fragment (44, offset 0, more fragments).
func ext6(t testing.TB, chain []uint8, sport, dport uint16, fragOffset uint16) []byte {
	t.Helper()
	var body []byte
	nexts := append(append([]uint8(nil), chain[1:]...), 17)
	for i, h := range chain {
		switch h {
		case 44:
			off := fragOffset << 3
			if fragOffset == 0 {
				off |= 1 // more fragments
			}
			body = append(body, nexts[i], 0, byte(off>>8), byte(off), 0, 0, 0x12, 0x34)
		default:
			// 16 bytes: hdr ext len 1, padded with a PadN option.
			body = append(body, nexts[i], 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		}
	}
	udp := []byte{byte(sport >> 8), byte(sport), byte(dport >> 8), byte(dport), 0, 12, 0, 0, 'h', 'e', 'l', 'o'}
	if fragOffset == 0 {
		body = append(body, udp...)
	} else {
		body = append(body, "payload-of-a-later-fragment"...)
	}
	first := uint8(17)
	if len(chain) > 0 {
		first = chain[0]
	}
	ip := ip6("2001:db8::1", "2001:db8::2", layers.IPProtocol(first))
	return serialize(t, ip, gopacket.Payload(body))
}

// frag4 builds an IPv4 UDP packet's fragment: offset in 8-byte units.
func frag4(t testing.TB, offset uint16, payload []byte) []byte {
	ip := ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP)
	ip.FragOffset = offset
	ip.Flags = layers.IPv4MoreFragments
	ip.Id = 77
	return serialize(t, ip, gopacket.Payload(payload))
}
