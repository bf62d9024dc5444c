package main

import (
	"bytes"
	"net"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		panic(err) // only on a bug in this generator
	}
	return bytes.Clone(buf.Bytes())
}

func ip4(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
}

func ip6(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
}

// udp4 is an IPv4/UDP packet (no link layer) with n bytes of payload.
func udp4(src, dst string, sport, dport uint16, n int) []byte {
	ip := ip4(src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	u.SetNetworkLayerForChecksum(ip)
	return serialize(ip, u, gopacket.Payload(make([]byte, n)))
}

func tcp4(src, dst string, sport, dport uint16, seq uint32, n int) []byte {
	ip := ip4(src, dst, layers.IPProtocolTCP)
	t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: seq, ACK: true, PSH: true, Window: 65535, DataOffset: 5}
	t.SetNetworkLayerForChecksum(ip)
	return serialize(ip, t, gopacket.Payload(make([]byte, n)))
}

func udp6(src, dst string, sport, dport uint16, n int) []byte {
	ip := ip6(src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	u.SetNetworkLayerForChecksum(ip)
	return serialize(ip, u, gopacket.Payload(make([]byte, n)))
}

func icmp6Echo(src, dst string, id, seq uint16) []byte {
	ip := ip6(src, dst, layers.IPProtocolICMPv6)
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	ic.SetNetworkLayerForChecksum(ip)
	echo := &layers.ICMPv6Echo{Identifier: id, SeqNumber: seq}
	return serialize(ip, ic, echo, gopacket.Payload(make([]byte, 8)))
}

func icmp4Echo(src, dst string, id, seq uint16) []byte {
	ip := ip4(src, dst, layers.IPProtocolICMPv4)
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: seq}
	return serialize(ip, ic, gopacket.Payload(make([]byte, 8)))
}

// eth puts an Ethernet header of the given type in front of payload.
func eth(et layers.EthernetType, payload []byte) []byte {
	return serialize(&layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: et}, gopacket.Payload(payload))
}

// rawEth is eth without the padding to 60 bytes that gopacket adds: for
// frames that must end where their payload ends.
func rawEth(et uint16, payload []byte) []byte {
	b := append(append(bytes.Clone(macB), macA...), byte(et>>8), byte(et))
	return append(b, payload...)
}

func eth4(ip []byte) []byte { return eth(layers.EthernetTypeIPv4, ip) }
func eth6(ip []byte) []byte { return eth(layers.EthernetTypeIPv6, ip) }
