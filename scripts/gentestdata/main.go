// Command gentestdata writes the synthetic captures in testdata/ that the
// replay tests use. Everything is derived from a fixed seed and fixed
// times, so running it again gives the same bytes:
//
//	go run ./scripts/gentestdata            # writes ./testdata
//	go run ./scripts/gentestdata -out DIR
//	go run ./scripts/gentestdata -big N -flows F -out DIR   # only bench.pcap: N packets over F flows
//
// Packets are built with gopacket.SerializeLayers and written with pcapgo's
// Writer and NgWriter. Link-layer headers that gopacket cannot serialize
// (Linux SLL/SLL2, BSD NULL/LOOP, NFLOG) are written as bytes in front of a
// serialized IP packet. testdata/README.md says what each file holds.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// t0 is the capture start of every file: 2025-01-01 00:00:00 UTC.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
)

func main() {
	out := flag.String("out", "testdata", "output directory")
	big := flag.Int("big", 0, "write only bench.pcap with this many packets")
	nflows := flag.Int("flows", 10000, "flows in bench.pcap")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	if *big > 0 {
		if err := writeBench(filepath.Join(*out, "bench.pcap"), *big, *nflows); err != nil {
			fail(err)
		}
		return
	}
	for _, f := range files {
		b, err := f.gen()
		if err != nil {
			fail(fmt.Errorf("%s: %v", f.name, err))
		}
		if err := os.WriteFile(filepath.Join(*out, f.name), b, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentestdata:", err)
	os.Exit(1)
}

var files = []struct {
	name string
	gen  func() ([]byte, error)
}{
	{"multiflow.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, multiflow()) }},
	{"multiflow-ns-be.pcap", func() ([]byte, error) {
		b, err := pcapFile(layers.LinkTypeEthernet, true, multiflow())
		if err != nil {
			return nil, err
		}
		return bigEndian(b), nil
	}},
	{"multiflow.pcap.gz", func() ([]byte, error) {
		b, err := pcapFile(layers.LinkTypeEthernet, false, multiflow())
		if err != nil {
			return nil, err
		}
		return gz(b)
	}},
	{"vlan-mpls.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, vlanMPLS()) }},
	{"ipv6-ext-frag.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, extFrag()) }},
	{"sll.pcap", func() ([]byte, error) { return pcapFile(113, false, cooked(sllHeader)) }},
	{"sll2.pcap", func() ([]byte, error) { return pcapFile(276, false, cooked(sll2Header)) }},
	{"raw101.pcap", func() ([]byte, error) { return pcapFile(101, false, rawIP(true, true)) }},
	{"raw12.pcap", func() ([]byte, error) { return pcapFile(12, false, rawIP(true, true)) }},
	{"raw14.pcap", func() ([]byte, error) { return pcapFile(14, false, rawIP(true, true)) }},
	{"ipv4-228.pcap", func() ([]byte, error) { return pcapFile(228, false, rawIP(true, false)) }},
	{"ipv6-229.pcap", func() ([]byte, error) { return pcapFile(229, false, rawIP(false, true)) }},
	{"null.pcap", func() ([]byte, error) { return pcapFile(0, false, nullFrames(false)) }},
	{"loop.pcap", func() ([]byte, error) { return pcapFile(108, false, nullFrames(true)) }},
	{"nflog.pcap", func() ([]byte, error) { return pcapFile(239, false, nflog()) }},
	{"mixed.pcapng", mixedNg},
	{"mixed.pcapng.gz", func() ([]byte, error) {
		b, err := mixedNg()
		if err != nil {
			return nil, err
		}
		return gz(b)
	}},
	{"policy-mix.pcapng", policyMix},
	{"truncated.pcap", truncated},
	{"huge-caplen.pcap", hugeCaplen},
	{"unsupported-linktype.pcap", func() ([]byte, error) {
		return pcapFile(105, false, []frame{{t: t0, data: make([]byte, 24)}}) // IEEE 802.11
	}},
}

// frame is one record: capture time, bytes, and for pcapng the interface.
type frame struct {
	t     time.Time
	data  []byte
	iface int
}

// pcapFile writes frames as a little-endian pcap (nanosecond magic if ns).
func pcapFile(lt layers.LinkType, ns bool, frames []frame) ([]byte, error) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if ns {
		w = pcapgo.NewWriterNanos(&buf)
	}
	if err := w.WriteFileHeader(65535, lt); err != nil {
		return nil, err
	}
	for _, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: f.t, CaptureLength: len(f.data), Length: len(f.data)}
		if err := w.WritePacket(ci, f.data); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// bigEndian rewrites a little-endian pcap as big-endian (pcapgo writes
// only little-endian): every header field is byte-swapped.
func bigEndian(b []byte) []byte {
	out := bytes.Clone(b)
	swap32 := func(p []byte) { binary.BigEndian.PutUint32(p, binary.LittleEndian.Uint32(p)) }
	swap16 := func(p []byte) { binary.BigEndian.PutUint16(p, binary.LittleEndian.Uint16(p)) }
	swap32(out[0:4])
	swap16(out[4:6])
	swap16(out[6:8])
	for _, o := range []int{8, 12, 16, 20} {
		swap32(out[o : o+4])
	}
	for i := 24; i+16 <= len(out); {
		n := int(binary.LittleEndian.Uint32(out[i+8 : i+12]))
		for o := 0; o < 16; o += 4 {
			swap32(out[i+o : i+o+4])
		}
		i += 16 + n
	}
	return out
}

// gz compresses b with a header that carries no name or time.
func gz(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

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

// mixedNg: a pcapng with four interfaces of different link types and
// timestamp resolutions (Ethernet in ns, raw IP in µs, Linux SLL in ns,
// BSD NULL in 2^-20 s), their packets interleaved.
func mixedNg() ([]byte, error) {
	var buf bytes.Buffer
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper gentestdata"}}
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet}, opts)
	if err != nil {
		return nil, err
	}
	for _, intf := range []pcapgo.NgInterface{{Name: "tun0", LinkType: 101}, {Name: "any", LinkType: 113}, {Name: "lo0", LinkType: 0}} {
		if _, err := w.AddInterface(intf); err != nil {
			return nil, err
		}
	}
	ips := mixIP()
	for i := range 16 {
		p := ips[i%len(ips)]
		iface := i % 4
		et := uint16(0x0800)
		fam := uint32(2)
		if p[0]>>4 == 6 {
			et, fam = 0x86dd, 30
		}
		var data []byte
		switch iface {
		case 0:
			data = eth6or4(p)
		case 1:
			data = p
		case 2:
			data = append(sllHeader(et), p...)
		case 3:
			data = append(binary.LittleEndian.AppendUint32(nil, fam), p...)
		}
		t := t0.Add(time.Duration(i)*50*time.Millisecond + 125*time.Microsecond)
		// NgWriter always writes nanoseconds and declares if_tsresol 9;
		// patchTsresol below changes the declarations of interfaces 1
		// and 3, so give it the count in their units.
		switch iface {
		case 1:
			t = time.Unix(0, t.UnixNano()/1000)
		case 3:
			t = time.Unix(0, int64(float64(t.UnixNano())/1e9*(1<<20)))
		}
		ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(data), InterfaceIndex: iface}
		if err := w.WritePacket(ci, data); err != nil {
			return nil, err
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if err := patchTsresol(b, 1, 6); err != nil {
		return nil, err
	}
	if err := patchTsresol(b, 3, 0x80|20); err != nil {
		return nil, err
	}
	return b, nil
}

// patchTsresol sets the if_tsresol option of the idb-th interface
// description block of a little-endian pcapng to v.
func patchTsresol(b []byte, idb int, v byte) error {
	n := 0
	for i := 0; i+12 <= len(b); {
		typ, l := binary.LittleEndian.Uint32(b[i:]), int(binary.LittleEndian.Uint32(b[i+4:]))
		if typ == 1 {
			if n == idb {
				for o := i + 16; o+4 <= i+l-4; {
					code, ol := binary.LittleEndian.Uint16(b[o:]), int(binary.LittleEndian.Uint16(b[o+2:]))
					if code == 9 && ol == 1 {
						b[o+4] = v
						return nil
					}
					o += 4 + (ol+3)&^3
				}
			}
			n++
		}
		i += l
	}
	return fmt.Errorf("no if_tsresol in interface %d", idb)
}

// truncated: ten good records, then a record cut off in its data.
func truncated() ([]byte, error) {
	fs := multiflow()[:11]
	b, err := pcapFile(layers.LinkTypeEthernet, false, fs)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-len(fs[10].data)/2], nil
}

// hugeCaplen: a pcap declaring a 4 GiB snap length, one good record, then a
// record header claiming 2 GiB of data followed by a few bytes.
func hugeCaplen() ([]byte, error) {
	b, err := pcapFile(layers.LinkTypeEthernet, false, multiflow()[:1])
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(b[16:20], 0xffffffff)
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(t0.Unix()+1))
	binary.LittleEndian.PutUint32(hdr[8:12], 0x7fffffff)
	binary.LittleEndian.PutUint32(hdr[12:16], 0x7fffffff)
	b = append(b, hdr...)
	return append(b, make([]byte, 64)...), nil
}

// writeBench writes n packets over nflows UDP flows (Ethernet, IPv4, frames
// of 60 to 260 bytes), 1 µs apart, round-robin over the flows in a seeded
// shuffle.
func writeBench(path string, n, nflows int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriter(bw)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	pkts := make([][]byte, nflows)
	for i := range pkts {
		src := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		pkts[i] = eth4(udp4(src, "192.0.2.1", uint16(1024+i%60000), 443, 18+rng.IntN(200)))
	}
	order := rng.Perm(nflows)
	for k := range n {
		p := pkts[order[k%nflows]]
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(k) * time.Microsecond), CaptureLength: len(p), Length: len(p)}
		if err := w.WritePacket(ci, p); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// policyMixClasses describe policy-mix.pcapng: traffic for each class of
// testdata/policy-mix.toml, 2 s of it. Exported for the tests that check

var policyMixClasses = []struct {
	Name string
	// Packets: source, protocol, destination port, rate, interface.
	Src      []string
	TCP      bool
	Port     uint16
	Rate     float64
	Iface    int
	Fragment bool // a non-first IPv4 fragment: ports unreadable
}{
	{Name: "mgmt-ssh", Src: []string{"10.9.1.5"}, TCP: true, Port: 22, Rate: 50},
	{Name: "mgmt-v6", Src: []string{"fd00:9::7"}, TCP: true, Port: 8080, Rate: 20},
	{Name: "lab", Src: []string{"10.20.0.1"}, Port: 5000, Rate: 10, Iface: 1},
	{Name: "dns", Src: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}, Port: 53, Rate: 20},
	{Name: "web-80", Src: []string{"198.51.100.7"}, TCP: true, Port: 80, Rate: 20},
	{Name: "web-443", Src: []string{"198.51.100.8"}, TCP: true, Port: 443, Rate: 20},
	{Name: "frag-from-mgmt", Src: []string{"10.9.1.5"}, TCP: true, Port: 22, Rate: 10, Fragment: true},
	{Name: "other", Src: []string{"203.0.113.9"}, Port: 9000, Rate: 50},
}

// policyMix writes policyMixClasses as a pcapng capture on two Ethernet
// interfaces, eth0 and eth1, for 2 s.
func policyMix() ([]byte, error) {
	var buf bytes.Buffer
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper gentestdata"}}
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet}, opts)
	if err != nil {
		return nil, err
	}
	if _, err := w.AddInterface(pcapgo.NgInterface{Name: "eth1", LinkType: layers.LinkTypeEthernet}); err != nil {
		return nil, err
	}
	type rec struct {
		t     time.Time
		data  []byte
		iface int
	}
	var rs []rec
	for ci, c := range policyMixClasses {
		for si, src := range c.Src {
			n := int(2 * c.Rate)
			start := time.Duration(ci*1000+si*250) * time.Microsecond
			for k := 0; k < n; k++ {
				t := t0.Add(start + time.Duration(float64(k)*float64(time.Second)/c.Rate))
				dst := "10.0.1.1"
				if strings.Contains(src, ":") {
					dst = "fd00::1"
				}
				sport := 40000 + uint16(si)
				var p []byte
				switch {
				case c.Fragment:
					ip := ip4(src, dst, layers.IPProtocolTCP)
					ip.Id, ip.FragOffset = uint16(k), 8
					p = serialize(ip, gopacket.Payload(make([]byte, 24)))
				case c.TCP && dst == "fd00::1":
					ip := ip6(src, dst, layers.IPProtocolTCP)
					tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(c.Port), Seq: uint32(k), ACK: true, Window: 65535, DataOffset: 5}
					tc.SetNetworkLayerForChecksum(ip)
					p = serialize(ip, tc, gopacket.Payload(make([]byte, 20)))
				case c.TCP:
					p = tcp4(src, dst, sport, c.Port, uint32(k), 20)
				default:
					p = udp4(src, dst, sport, c.Port, 30)
				}
				rs = append(rs, rec{t: t, data: eth6or4(p), iface: c.Iface})
			}
		}
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].t.Before(rs[b].t) })
	for _, r := range rs {
		ci := gopacket.CaptureInfo{Timestamp: r.t, CaptureLength: len(r.data), Length: len(r.data), InterfaceIndex: r.iface}
		if err := w.WritePacket(ci, r.data); err != nil {
			return nil, err
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
