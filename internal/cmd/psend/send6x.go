package main

import (
	"github.com/packetshaper/packetshaper/internal/inetsum"

	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"net/netip"
)

// IPv6 next-header values send6x writes.
const (
	protoUDP     = 17
	protoDstOpts = 60
)

// Bounds of send6x's extension headers: a header is at most 2048 bytes
// (its length field counts 8-byte units after the first, in one byte).
const (
	maxDstOpts   = 64
	maxDstOptLen = 2048
	maxExtBytes  = 4096
)

// udp6Datagram is a UDP header from sport to dst with its true length and
// its checksum over the IPv6 pseudo-header from src, then payload.
func udp6Datagram(src netip.Addr, dst netip.AddrPort, sport uint16, payload []byte) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	binary.BigEndian.PutUint16(udp[6:], udp6Checksum(src, dst.Addr(), udp))
	return udp
}

// ipv6Only refuses a destination that is not IPv6 (mode sends IPv6 only)
// and parses --src, if given, as an IPv6 address (else the zero Addr).
func ipv6Only(mode string, dsts []netip.AddrPort, src string) (netip.Addr, error) {
	for _, d := range dsts {
		if !d.Addr().Is6() {
			return netip.Addr{}, badFlag("--dst %v: %s sends IPv6 only", d, mode)
		}
	}
	if src == "" {
		return netip.Addr{}, nil
	}
	srcIP, err := netip.ParseAddr(src)
	if err != nil || !srcIP.Is6() {
		return netip.Addr{}, badFlag("--src %q: not an IPv6 address", src)
	}
	return srcIP, nil
}

// runSend6x is send for IPv6 UDP datagrams that carry Destination Options
// headers between the IPv6 header and the UDP header: --dstopts headers of
// --dstopt-len bytes each. A raw socket of protocol 60 (socket(AF_INET6,
// SOCK_RAW, IPPROTO_DSTOPTS)) has the kernel write the IPv6 header with
// Next Header 60; send6x writes the chain, the UDP header (checksum over the
// IPv6 pseudo-header with the final destination and Next Header 17) and the
// payload. Flows, pacing, counting and output are send's; the receiver is
// an ordinary UDP socket (psend recv).
func runSend6x(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("send6x", flag.ContinueOnError)
	o := addSendFlags(fs)
	nopts := fs.Int("dstopts", 1, fmt.Sprintf("Destination Options headers in front of the UDP header, 1..%d", maxDstOpts))
	optLen := fs.Int("dstopt-len", 8, fmt.Sprintf("bytes per Destination Options header, 8..%d, rounded up to a multiple of 8", maxDstOptLen))
	dsts, err := o.parseMode("send6x", fs, args)
	if err != nil {
		return nil, err
	}
	hlen := (*optLen + 7) &^ 7
	switch {
	case *nopts < 1 || *nopts > maxDstOpts:
		return nil, badFlag("--dstopts %d: must be 1..%d", *nopts, maxDstOpts)
	case *optLen < 8 || *optLen > maxDstOptLen:
		return nil, badFlag("--dstopt-len %d: must be 8..%d", *optLen, maxDstOptLen)
	case *nopts*hlen > maxExtBytes:
		return nil, badFlag("--dstopts %d × --dstopt-len %d: at most %d bytes of headers", *nopts, hlen, maxExtBytes)
	case *nopts*hlen+8+o.size > 65535:
		return nil, badFlag("--size %d with %d bytes of headers: more than an IPv6 payload length can say (65535)", o.size, *nopts*hlen)
	}
	srcIP, err := ipv6Only("send6x", dsts, o.src)
	if err != nil {
		return nil, err
	}

	payload := make([]byte, o.size)
	fillPayload(payload)
	// One raw socket per destination, bound to the source address the
	// checksum covers.
	var conns []*net.IPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	targets := make([][]target, o.flows)
	for _, d := range dsts {
		src := srcIP
		if !src.IsValid() {
			if src, err = routeSource(d); err != nil {
				return nil, err
			}
		}
		c, err := net.ListenIP("ip6:60", &net.IPAddr{IP: src.AsSlice(), Zone: src.Zone()})
		if err != nil {
			return nil, fmt.Errorf("raw IPv6 socket (needs root or CAP_NET_RAW): %w", err)
		}
		conns = append(conns, c)
		rc, sa, err := rawSockaddr(c, netip.AddrPortFrom(d.Addr(), 0))
		if err != nil {
			return nil, err
		}
		to := &net.IPAddr{IP: d.Addr().AsSlice(), Zone: d.Addr().Zone()}
		for f := range targets {
			buf := dstOptsDatagram(src, d, uint16(o.sport+f), *nopts, hlen, payload)
			targets[f] = append(targets[f], target{
				write: func() error { _, err := c.WriteToIP(buf, to); return err },
				rc:    rc, buf: buf, sa: sa,
			})
		}
	}
	return runTargets(ctx, o, dsts, targets, &SendResult{DstOpts: *nopts, DstOptLen: hlen, ExtBytes: *nopts * hlen}), nil
}

// routeSource is the source address the kernel picks for d (connecting a
// UDP socket sends nothing).
func routeSource(d netip.AddrPort) (netip.Addr, error) {
	c, err := net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(d))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", d, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr(), nil
}

// dstOptsDatagram is what follows the IPv6 header: n Destination Options
// headers of hlen bytes, then a UDP header from sport to dst with a correct
// checksum, then payload.
func dstOptsDatagram(src netip.Addr, dst netip.AddrPort, sport uint16, n, hlen int, payload []byte) []byte {
	b := make([]byte, 0, n*hlen+8+len(payload))
	for i := range n {
		next := byte(protoDstOpts)
		if i == n-1 {
			next = protoUDP
		}
		b = append(b, dstOptsHeader(hlen, next)...)
	}
	return append(b, udp6Datagram(src, dst, sport, payload)...)
}

// dstOptsHeader is one Destination Options header of n bytes (a multiple
// of 8, 8..2048) with Next Header next, holding only options that Linux
// accepts (net/ipv6/exthdrs.c, ip6_parse_tlv): runs of padding (Pad1, PadN
// with zero bytes) of at most 7 bytes — more is dropped as an attack — and
// between them options of the RFC 4727 experimental type 0x1e, whose top
// bits 00 tell a receiver that does not know it to skip it. At most 8 of
// those in a 2048-byte header: the limit of net.ipv6.max_dst_opts_number's
// default. An 8-byte header is one PadN option.
func dstOptsHeader(n int, next byte) []byte {
	h := make([]byte, n)
	h[0], h[1] = next, byte(n/8-1)
	for body := h[2:]; len(body) > 0; {
		switch r := len(body); {
		case r == 1:
			body[0] = 0 // Pad1
			body = body[1:]
		case r <= 7:
			body[0], body[1] = 1, byte(r-2) // PadN, zero bytes
			body = body[r:]
		default:
			l := min(r-2, 255)
			body[0], body[1] = 0x1e, byte(l)
			body = body[2+l:]
		}
	}
	return h
}

// udp6Checksum is the UDP checksum of udp (header with a zero checksum
// field, and payload) from src to dst (RFC 8200 section 8.1: the
// pseudo-header's Next Header is 17 whatever extension headers come
// between).
func udp6Checksum(src, dst netip.Addr, udp []byte) uint16 {
	s, d := src.As16(), dst.As16()
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[0:], uint32(len(udp)))
	tail[7] = protoUDP
	c := ^inetsum.Add(udp, inetsum.Add(tail[:], inetsum.Add(d[:], inetsum.Add(s[:], 0))))
	if c == 0 {
		c = 0xffff // 0 means "no checksum", which IPv6 forbids
	}
	return c
}
