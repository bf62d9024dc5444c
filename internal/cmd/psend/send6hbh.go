package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
)

// protoHopByHop is the IPv6 next-header value of a hop-by-hop header.
const protoHopByHop = 0

// runSend6hbh is send for IPv6 UDP datagrams whose IPv6 payload length is 0,
// behind one 8-byte hop-by-hop header (a PadN option, no jumbo option): the
// shape RFC 2675 gives jumbograms, which the kernel accepts and delivers
// without trimming (ip6_rcv_core trims only when the payload length is set
// or no hop-by-hop header follows), so the packet's real length is only
// the link's. No socket of an IP family can send it (the kernel writes the
// payload length), so send6hbh writes whole IPv6 packets to a packet socket
// (AF_PACKET, SOCK_DGRAM: the kernel adds the Ethernet header) on --iface,
// to the link-layer address --dst-mac (root). Each packet is 40 + 8 + 8 +
// --size bytes. Flows, pacing (paced only), counting and output are send's.
func runSend6hbh(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("send6hbh", flag.ContinueOnError)
	o := addSendFlags(fs)
	iface := fs.String("iface", "", "the device to send on (required)")
	dmac := fs.String("dst-mac", "", "the next hop's link-layer address on --iface, e.g. 02:00:00:00:00:01 (required)")
	dsts, err := o.parseMode("send6hbh", fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case o.pps == 0:
		return nil, badFlag("--pps 0: send6hbh sends paced only")
	case *iface == "":
		return nil, badFlag("--iface: required")
	case o.size > 65535-56:
		return nil, badFlag("--size %d: at most %d", o.size, 65535-56)
	}
	mac, err := net.ParseMAC(*dmac)
	if err != nil || len(mac) != 6 {
		return nil, badFlag("--dst-mac %q: want an Ethernet address (6 bytes)", *dmac)
	}
	ifi, err := net.InterfaceByName(*iface)
	if err != nil {
		return nil, badFlag("--iface %q: %v", *iface, err)
	}
	srcIP, err := ipv6Only("send6hbh", dsts, o.src)
	if err != nil {
		return nil, err
	}
	ps, err := openPacketSocket(ifi.Index, mac)
	if err != nil {
		return nil, fmt.Errorf("packet socket on %s (needs root or CAP_NET_RAW): %w", *iface, err)
	}
	defer ps.close()

	src := func(d netip.AddrPort) (netip.Addr, error) {
		if srcIP.IsValid() {
			return srcIP, nil
		}
		return routeSource(d)
	}
	return sendPackets(ctx, o, dsts, src, hbhZeroPacket, ps.send)
}

// hbhZeroPacket is a whole IPv6 packet from src to dst: payload length 0,
// hop limit 64, a hop-by-hop header of 8 bytes (next header UDP, one PadN
// option of 4 zero bytes), then a UDP header from sport with its true length
// and checksum, then payload.
func hbhZeroPacket(src netip.Addr, dst netip.AddrPort, sport uint16, payload []byte) []byte {
	b := make([]byte, 48, 56+len(payload))
	b[0] = 0x60
	b[6], b[7] = protoHopByHop, 64 // payload length b[4:6] stays 0
	s, d := src.As16(), dst.Addr().As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	b[40], b[41], b[42], b[43] = protoUDP, 0, 1, 4 // hop-by-hop: PadN of 4
	return append(b, udp6Datagram(src, dst, sport, payload)...)
}
