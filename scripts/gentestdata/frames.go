package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Flow is one flow of multiflow.pcap: a constant packet rate from start.
type Flow struct {
	Rate  float64 // packets per second
	Start time.Duration
	N     int
	TCP   bool
	Port  uint16
}

// MultiflowFlows are multiflow.pcap's flows: five flows at 5, 20, 50, 100
// and 10 packets per second for 3 s, from 10.0.0.1 to 10.0.1.1 on
// destination ports 5001..5005 (the last one TCP), each starting at its own
// seeded offset within the first 100 ms. Replayed with --pps 10 each flow's
// accepted count follows from its rate (see replay's tests).
var MultiflowFlows = []Flow{
	{Rate: 5, N: 15, Port: 5001},
	{Rate: 20, N: 60, Port: 5002},
	{Rate: 50, N: 150, Port: 5003},
	{Rate: 100, N: 300, Port: 5004},
	{Rate: 10, N: 30, Port: 5005, TCP: true},
}

func multiflow() []frame {
	rng := rand.New(rand.NewPCG(1, 2))
	var fs []frame
	for i := range MultiflowFlows {
		fl := &MultiflowFlows[i]
		start := time.Duration(rng.IntN(100_000)) * time.Microsecond
		for k := range fl.N {
			t := t0.Add(start + time.Duration(float64(k)*float64(time.Second)/fl.Rate))
			var ip []byte
			if fl.TCP {
				ip = tcp4("10.0.0.1", "10.0.1.1", 40000+uint16(i), fl.Port, uint32(1000+40*k), 40)
			} else {
				ip = udp4("10.0.0.1", "10.0.1.1", 40000+uint16(i), fl.Port, 20+rng.IntN(80))
			}
			fs = append(fs, frame{t: t.Truncate(time.Microsecond), data: eth4(ip), iface: i})
		}
	}
	sort.SliceStable(fs, func(a, b int) bool { return fs[a].t.Before(fs[b].t) })
	return fs
}

// vlanMPLS: Ethernet frames under VLAN tags, MPLS, PPPoE and LLC/SNAP, plus
// non-IP frames and frames cut short. One record every 10 ms.
func vlanMPLS() []frame {
	p4 := udp4("192.0.2.1", "192.0.2.2", 1000, 2000, 32)
	p6 := udp6("2001:db8::1", "2001:db8::2", 1000, 2000, 32)
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	vlan := func(vid, inner uint16) []byte {
		return []byte{byte(vid >> 8), byte(vid), byte(inner >> 8), byte(inner)}
	}
	mpls := func(label uint32, bottom bool) []byte {
		v := label<<12 | 64
		if bottom {
			v |= 1 << 8
		}
		return binary.BigEndian.AppendUint32(nil, v)
	}
	arp := serialize(&layers.Ethernet{SrcMAC: macA, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macA, SourceProtAddress: []byte{192, 0, 2, 1},
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{192, 0, 2, 2}})
	frames := [][]byte{
		eth(0x8100, cat(vlan(100, 0x0800), p4)),                                                           // 802.1Q
		eth(0x88a8, cat(vlan(200, 0x8100), vlan(100, 0x86dd), p6)),                                        // 802.1ad QinQ
		eth(0x9100, cat(vlan(300, 0x8100), vlan(200, 0x8100), vlan(100, 0x0800), p4)),                     // three tags
		eth(0x8847, cat(mpls(16, false), mpls(17, true), p4)),                                             // MPLS, two labels
		eth(0x8847, cat(mpls(18, true), p6)),                                                              // MPLS, IPv6
		eth(0x8847, cat(mpls(19, true), []byte{0, 0, 0, 0}, eth4(p4))),                                    // MPLS pseudowire with control word: not IP
		eth(0x8864, cat([]byte{0x11, 0, 0, 1, byte((len(p4) + 2) >> 8), byte(len(p4) + 2), 0, 0x21}, p4)), // PPPoE session, PPP IPv4
		serialize(&layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeLLC, Length: uint16(8 + len(p4))},
			gopacket.Payload(cat([]byte{0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00}, p4))), // 802.3 + LLC/SNAP
		arp,                           // ARP: not IP
		eth(0x88cc, make([]byte, 46)), // LLDP: not IP
		serialize(&layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeLLC, Length: 38},
			gopacket.Payload(cat([]byte{0x42, 0x42, 0x03}, make([]byte, 35)))), // STP over LLC: not IP
		eth4(p4)[:10],                  // cut inside the Ethernet header: malformed
		rawEth(0x8100, []byte{0, 100}), // cut inside the VLAN tag: malformed
		rawEth(0x0800, p4[:12]),        // IPv4 cut inside its header: malformed
		eth(0x8100, cat(vlan(100, 0x0800), p4)),
	}
	var fs []frame
	for i, b := range frames {
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 10 * time.Millisecond), data: b})
	}
	return fs
}

// extFrag: IPv6 extension header chains, IPv6 and IPv4 fragments, and a
// chain cut short, over Ethernet.
func extFrag() []frame {
	ul := &layers.UDP{SrcPort: 3000, DstPort: 4000}
	ul.SetNetworkLayerForChecksum(ip6("2001:db8::a", "2001:db8::b", layers.IPProtocolUDP))
	u := serialize(ul, gopacket.Payload(make([]byte, 8)))
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	hbh := func(next byte) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} } // Hop-by-Hop, PadN
	dst := func(next byte) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} } // Destination Options
	rt := func(next byte) []byte { return []byte{next, 0, 4, 0, 0, 0, 0, 0} }  // Routing type 4 (SRH), 0 segments left
	frag := func(next byte, off uint16, more bool, id uint32) []byte {
		v := off << 3
		if more {
			v |= 1
		}
		return []byte{next, 0, byte(v >> 8), byte(v), byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	}
	v6 := func(next layers.IPProtocol, payload []byte) []byte {
		return serialize(ip6("2001:db8::a", "2001:db8::b", next), gopacket.Payload(payload))
	}
	v4frag := func(off uint16, more bool, payload []byte) []byte {
		ip := ip4("198.51.100.1", "198.51.100.2", layers.IPProtocolUDP)
		ip.Id = 77
		ip.FragOffset = off
		if more {
			ip.Flags = layers.IPv4MoreFragments
		}
		return serialize(ip, gopacket.Payload(payload))
	}
	pkts := [][]byte{
		v6(0, cat(hbh(43), rt(60), dst(17), u)),              // HBH, routing, dest opts, UDP
		v6(0, cat(hbh(44), frag(17, 0, true, 9), u)),         // first fragment, ports visible
		v6(44, frag(17, 2, false, 9)),                        // non-first fragment: no ports
		v6(44, cat(frag(17, 2, false, 9), make([]byte, 16))), // same, with data
		v4frag(0, true, u),                                   // IPv4 first fragment
		v4frag(2, false, make([]byte, 16)),                   // IPv4 non-first fragment
		v6(0, cat(hbh(60), []byte{17, 5})),                   // dest opts header cut short: keyed without ports
		v6(0, cat(hbh(43), rt(60), dst(17), u)),
	}
	var fs []frame
	for i, p := range pkts {
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 10 * time.Millisecond), data: eth6or4(p)})
	}
	return fs
}

func eth6or4(p []byte) []byte {
	if p[0]>>4 == 6 {
		return eth6(p)
	}
	return eth4(p)
}

// mixIP: an IPv4 UDP flow, an IPv6 UDP flow, ICMP echo for both.
func mixIP() [][]byte {
	return [][]byte{
		udp4("10.1.0.1", "10.1.0.2", 1111, 53, 40),
		udp6("fd00::1", "fd00::2", 2222, 53, 40),
		icmp4Echo("10.1.0.1", "10.1.0.2", 7, 1),
		icmp6Echo("fd00::1", "fd00::2", 8, 1),
		udp4("10.1.0.1", "10.1.0.2", 1111, 53, 40),
		udp6("fd00::1", "fd00::2", 2222, 53, 40),
	}
}

func sllHeader(proto uint16) []byte {
	// packet type 0 (to us), ARPHRD_ETHER, address length 6, address (8 bytes), protocol
	b := []byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0x0a, 0, 0}
	return binary.BigEndian.AppendUint16(b, proto)
}

func sll2Header(proto uint16) []byte {
	// protocol, reserved, interface index, ARPHRD_ETHER, packet type, address length, address
	b := binary.BigEndian.AppendUint16(nil, proto)
	b = append(b, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6)
	return append(b, 2, 0, 0, 0, 0, 0x0a, 0, 0)
}

func cooked(hdr func(uint16) []byte) []frame {
	var fs []frame
	for i, p := range mixIP() {
		et := uint16(0x0800)
		if p[0]>>4 == 6 {
			et = 0x86dd
		}
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 100 * time.Millisecond), data: append(hdr(et), p...)})
	}
	arp := make([]byte, 28)
	fs = append(fs, frame{t: t0.Add(time.Second), data: append(hdr(0x0806), arp...)}) // ARP: not IP
	return fs
}

func rawIP(v4, v6 bool) []frame {
	var fs []frame
	for i, p := range mixIP() {
		if !v4 && p[0]>>4 == 4 || !v6 && p[0]>>4 == 6 {
			continue
		}
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 100 * time.Millisecond), data: p})
	}
	return fs
}

// nullFrames: DLT_NULL families in host byte order (here both orders, as
// writers get it wrong), or DLT_LOOP families in network byte order.
func nullFrames(loop bool) []frame {
	le := func(fam uint32) []byte { return binary.LittleEndian.AppendUint32(nil, fam) }
	be := func(fam uint32) []byte { return binary.BigEndian.AppendUint32(nil, fam) }
	hdr := le
	if loop {
		hdr = be
	}
	ips := mixIP()
	frames := [][]byte{
		append(hdr(2), ips[0]...),  // AF_INET
		append(hdr(30), ips[1]...), // AF_INET6 (Darwin)
		append(hdr(2), ips[2]...),
		append(hdr(24), ips[3]...),          // AF_INET6 (NetBSD/OpenBSD)
		append(hdr(28), ips[5]...),          // AF_INET6 (FreeBSD)
		append(hdr(10), ips[5]...),          // AF_INET6 (Linux)
		append(hdr(7), make([]byte, 20)...), // AF_ISO or so: not IP
		append(be(2), ips[4]...),            // the other byte order
	}
	if loop {
		frames[len(frames)-1] = append(le(2), ips[4]...)
	}
	var fs []frame
	for i, b := range frames {
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 100 * time.Millisecond), data: b})
	}
	return fs
}

// nflog: NFLOG records (family, version, resource id, then TLVs in host
// byte order with the packet in NFULA_PAYLOAD).
func nflog() []frame {
	tlv := func(bo binary.AppendByteOrder, typ uint16, v []byte) []byte {
		b := bo.AppendUint16(nil, uint16(4+len(v)))
		b = bo.AppendUint16(b, typ)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	msg := func(bo binary.AppendByteOrder, fam byte, ip []byte) []byte {
		b := []byte{fam, 0, 0, 1}
		b = append(b, tlv(bo, 1, []byte{0x08, 0x00, 3, 0})...) // NFULA_PACKET_HDR
		b = append(b, tlv(bo, 10, []byte("shaper\x00"))...)    // NFULA_PREFIX
		b = append(b, tlv(bo, 4, []byte{0, 0, 0, 2})...)       // NFULA_IFINDEX_INDEV
		return append(b, tlv(bo, 9, ip)...)                    // NFULA_PAYLOAD
	}
	ips := mixIP()
	le, be := binary.LittleEndian, binary.BigEndian
	frames := [][]byte{
		msg(le, 2, ips[0]),
		msg(le, 10, ips[1]),
		msg(le, 2, ips[2]),
		msg(be, 10, ips[3]), // TLVs from a big-endian host
		msg(le, 2, ips[4]),
		msg(le, 7, ips[4]), // AF_BRIDGE: not IP
		{2, 0, 0, 1},       // no payload TLV: malformed
	}
	var fs []frame
	for i, b := range frames {
		fs = append(fs, frame{t: t0.Add(time.Duration(i) * 100 * time.Millisecond), data: b})
	}
	return fs
}
