package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"

	"github.com/packetshaper/packetshaper/internal/inetsum"
)

// runSendTun is send for a link without an Ethernet header: it writes whole
// IPv4 UDP packets (IPv4 header with its checksum, UDP header with its
// checksum, payload) from --src into the tun device --tun (IFF_TUN,
// IFF_NO_PI: the device must exist, `ip tuntap add dev NAME mode tun`),
// which the kernel then receives on that device as if from its wire: at
// tc ingress the packet's network header is at offset 0. The device's own
// namespace is where it runs (it opens /dev/net/tun; root). Flows, pacing
// (paced only), counting and output are send's; the receiver is an
// ordinary UDP socket (psend recv) in the same namespace.
func runSendTun(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("sendtun", flag.ContinueOnError)
	o := addSendFlags(fs)
	dev := fs.String("tun", "", "the tun device to write into (required; IFF_TUN, no packet information)")
	dsts, err := o.parseMode("sendtun", fs, args)
	if err != nil {
		return nil, err
	}
	src, err := netip.ParseAddr(o.src)
	switch {
	case o.pps == 0:
		return nil, badFlag("--pps 0: sendtun sends paced only")
	case *dev == "":
		return nil, badFlag("--tun: required")
	case err != nil || !src.Is4():
		return nil, badFlag("--src %q: sendtun needs the IPv4 source address the packets carry", o.src)
	case o.size > maxUDPPayload:
		return nil, badFlag("--size %d: at most %d", o.size, maxUDPPayload)
	}
	for _, d := range dsts {
		if !d.Addr().Is4() {
			return nil, badFlag("--dst %v: sendtun sends IPv4 only", d)
		}
	}
	tun, err := openTun(*dev)
	if err != nil {
		return nil, fmt.Errorf("tun device %s (needs root): %w", *dev, err)
	}
	defer tun.close()
	return sendPackets(ctx, o, dsts, func(netip.AddrPort) (netip.Addr, error) { return src, nil }, ipv4UDPPacket, tun.write)
}

// ipv4UDPPacket is a whole IPv4 packet from src:sport to dst: TTL 64, DF
// set, no options, header checksum; a UDP header with its checksum; payload.
func ipv4UDPPacket(src netip.Addr, dst netip.AddrPort, sport uint16, payload []byte) []byte {
	b := make([]byte, 28, 28+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(28+len(payload)))
	b[6] = 0x40 // DF
	b[8], b[9] = 64, protoUDP
	s, d := src.As4(), dst.Addr().As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:], ^inetsum.Add(b[:20], 0))
	udp := b[20:28]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	b = append(b, payload...)
	var pseudo [12]byte
	copy(pseudo[0:4], s[:])
	copy(pseudo[4:8], d[:])
	pseudo[9] = protoUDP
	binary.BigEndian.PutUint16(pseudo[10:], uint16(8+len(payload)))
	c := ^inetsum.Add(b[20:], inetsum.Add(pseudo[:], 0))
	if c == 0 {
		c = 0xffff // 0 means "no checksum"
	}
	binary.BigEndian.PutUint16(b[26:], c)
	return b
}
