package flows

import "encoding/binary"

// Decode fills p from b, which must start at the IP header (as NFQUEUE
// delivers packets, and as link-layer decapsulation leaves them). It never
// panics and never allocates.
//
// Security contract: every packet whose IP header is valid decodes as IPv4 or
// IPv6 and so gets a flow key and is limited. Only bytes that are not an IP
// header at all (shorter than the fixed header, wrong version, IPv4 header
// length below 20, IPv4 total length below the header length) are Malformed:
// the kernel drops those itself before any netfilter hook. Anything that
// merely hides the transport header — a non-first fragment, a tiny first
// fragment (RFC 1858), IPv6 extension headers past the copy range or running
// past the packet, a transport header cut short — decodes with NoPorts and
// zero ports, so it counts against the address-and-protocol flow. No shape of
// packet escapes its limit by being hard to parse.
//
// Fragments: only the first fragment carries the transport header. A
// non-first fragment (offset > 0) decodes with Fragment and NoPorts, so in
// 5-tuple mode it counts against the flow (src, dst, proto, 0, 0) — the
// address+protocol flow — and never against a port-keyed flow whose ports
// it cannot show. An IPv6 non-first fragment's protocol is ProtoUnknown:
// only the first fragment's next header counts in reassembly. (An IPv4
// fragment's protocol is in its own header and part of the reassembly key,
// so it is kept.)
//
// IPv6 extension headers (hop-by-hop, routing, fragment, destination
// options, AH: those the kernel's ipv6_ext_hdr walks) are followed for as
// long as the bytes last; each is at least 8 bytes, so the walk is bounded by
// the packet's length.
func (p *Packet) Decode(b []byte) { p.DecodeLen(b, 0) }

// DecodeLen is Decode for a packet whose real length the caller knows
// beside the bytes it gives (b may be cut short: a copy range, a snap
// length): wire is that length (live, the kernel's packet length; in
// replay, the record's original length), 0 if unknown. It sets Length, the
// packet's real length, what a byte-rate limiter charges:
//
//   - the IP header's length (IPv4 total length, IPv6 payload length + 40)
//     when it is set and consistent: wire is unknown, or equal to it;
//   - else wire: when the header's length is 0 (big TCP, jumbograms, an IPv6
//     payload length 0 behind a hop-by-hop header, which the kernel does
//     not trim and delivers whole) or disagrees with the source's;
//   - else (header length 0 and wire unknown) the length of b.
//
// Never the copied length when the real one is known: a packet cut by the
// copy range is charged whole. A wire shorter than b is taken as len(b).
// Ports are still read only from within the header's stated length.
func (p *Packet) DecodeLen(b []byte, wire int) {
	if wire > 0 && wire < len(b) {
		wire = len(b)
	}
	*p = Packet{}
	if len(b) >= 1 {
		switch b[0] >> 4 {
		case 4:
			p.decode4(b, wire)
		case 6:
			p.decode6(b, wire)
		}
	}
	if p.Class == Malformed {
		*p = Packet{Length: realLength(0, wire, len(b))}
	}
}

// realLength is the length rule of DecodeLen: hdr is the IP header's length
// (0: not set), wire the source's (0: unknown, else >= n), n the length of
// the bytes given.
func realLength(hdr, wire, n int) int {
	switch {
	case hdr > 0 && (wire == 0 || hdr == wire):
		return hdr
	case wire > 0:
		return wire
	}
	return n
}

func (p *Packet) decode4(b []byte, wire int) {
	if len(b) < 20 {
		return
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return
	}
	total := int(binary.BigEndian.Uint16(b[2:4]))
	// end bounds where ports are read: the header's length when set.
	end := total
	if total < ihl {
		// TSO/GRO "big TCP" packets carry total length 0: the real
		// length is the source's (or, unknown, at least what was
		// captured); anything else shorter than the header is malformed.
		if total != 0 {
			return
		}
		end = len(b)
	}
	p.Length = max(realLength(total, wire, len(b)), ihl)
	proto := b[9]
	frag := binary.BigEndian.Uint16(b[6:8])
	offset := frag & 0x1fff
	copy(p.Src[:4], b[12:16])
	copy(p.Dst[:4], b[16:20])
	p.Proto = proto
	p.Class = IPv4
	if offset != 0 {
		p.Fragment = true
		p.NoPorts = hasPorts(proto)
		return
	}
	if len(b) < ihl {
		// Options cut by the capture: the transport header is out of reach.
		p.NoPorts = hasPorts(proto)
		return
	}
	// Ports are read only from within the packet's stated length, never
	// from link-layer padding or bytes past it.
	p.ports(proto, b[ihl:min(len(b), end)], false)
	if frag&0x2000 == 0 { // not a first fragment (MF)
		p.reply(b[ihl:min(len(b), end)], ihl, false)
	}
}

// IPv6 extension headers that Decode walks to find the transport header.
const (
	ipv6HopByHop = 0
	ipv6Routing  = 43
	ipv6Fragment = 44
	ipv6DestOpts = 60
	ipv6AH       = 51
	ipv6NoNext   = 59
)

func (p *Packet) decode6(b []byte, wire int) {
	if len(b) < 40 {
		return
	}
	copy(p.Src[:], b[8:24])
	copy(p.Dst[:], b[24:40])
	p.Class = IPv6
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	hdr, end := 40+plen, 40+plen
	if plen == 0 {
		// Jumbogram (hop-by-hop jumbo option), big TCP, or a payload
		// length 0 behind a hop-by-hop header (which the kernel does not
		// trim): the 16-bit field can't say; the real length is the
		// source's (or, unknown, what we were given).
		hdr, end = 0, len(b)
	}
	p.Length = realLength(hdr, wire, len(b))
	next := b[6]
	rest := b[40:min(len(b), end)]
	// cut marks a chain that ends before its transport header: the
	// protocol is unknown and the ports out of reach.
	cut := func() {
		p.Proto, p.NoPorts = ProtoUnknown, true
	}
	fragmented := false // a fragment header: no Reply
	for {
		switch next {
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts:
			if len(rest) < 8 {
				cut()
				return
			}
			n := (int(rest[1]) + 1) * 8
			if len(rest) < n {
				cut()
				return
			}
			next, rest = rest[0], rest[n:]
			continue
		case ipv6AH:
			// RFC 4302: payload length in 4-octet units, minus 2.
			if len(rest) < 8 {
				cut()
				return
			}
			n := (int(rest[1]) + 2) * 4
			if len(rest) < n {
				cut()
				return
			}
			next, rest = rest[0], rest[n:]
			continue
		case ipv6Fragment:
			if len(rest) < 8 {
				cut()
				return
			}
			offset := binary.BigEndian.Uint16(rest[2:4]) >> 3
			next, rest = rest[0], rest[8:]
			fragmented = true
			if offset != 0 {
				// A later fragment's next header means nothing: the
				// kernel reassembles by (source, destination, id) and
				// takes the protocol from the first fragment, so a
				// sender can write any value here. Trusting it would let
				// later fragments claim a protocol that an accept rule
				// lets through (ICMPv6, say) while their datagram is
				// UDP. The protocol is unknown.
				p.Proto = ProtoUnknown
				p.Fragment = true
				p.NoPorts = true
				return
			}
			continue
		}
		break
	}
	p.Proto = next
	if next == ipv6NoNext {
		return
	}
	p.ports(next, rest, true)
	if !fragmented {
		p.reply(rest, min(len(b), end)-len(rest), true)
	}
}

// reply sets Reply for the transport header l4, at offset off of the IP
// packet: a TCP segment whose real length (Length) ends with its header,
// ACK or RST set and FIN not; an ICMP or ICMPv6 error.
func (p *Packet) reply(l4 []byte, off int, v6 bool) {
	const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
	switch p.Proto {
	case ProtoTCP:
		if len(l4) < 20 {
			return
		}
		doff, flags := int(l4[12]>>4)*4, l4[13]
		p.Reply = doff >= 20 && p.Length-off == doff && flags&(ack|rst) != 0 && flags&fin == 0 &&
			(flags&syn == 0 || flags&ack != 0)
	case ProtoICMP:
		if !v6 && len(l4) >= 4 {
			t := l4[0]
			p.Reply = t == 3 || t == 11 || t == 12
		}
	case ProtoICMPv6:
		if v6 && len(l4) >= 4 {
			p.Reply = l4[0] >= 1 && l4[0] <= 4
		}
	}
}

// ports reads the transport ports (or what stands in for them) of proto from
// l4; when l4 is too short to hold them it sets NoPorts instead. Protocols
// without ports get zero ports.
func (p *Packet) ports(proto uint8, l4 []byte, v6 bool) {
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoUDPLite, ProtoSCTP:
		// The ports are the first four bytes of all four headers. A
		// first fragment too short to hold them (RFC 1858's
		// tiny-fragment attack) is keyed without them, with the later
		// fragments of its datagram.
		if len(l4) < 4 {
			p.NoPorts = true
			return
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:2])
		p.DstPort = binary.BigEndian.Uint16(l4[2:4])
	case ProtoICMP, ProtoICMPv6:
		if (proto == ProtoICMPv6) != v6 {
			// ICMP in IPv6 or ICMPv6 in IPv4: no ports to trust, key by
			// addresses and protocol.
			return
		}
		if len(l4) < 4 {
			p.NoPorts = true
			return
		}
		typ, code := l4[0], l4[1]
		if isEcho(typ, v6) {
			if len(l4) < 8 {
				p.NoPorts = true
				return
			}
			// Request and reply share the identifier, which stands
			// for both ports: a ping session is one flow per
			// direction, and one flow with --symmetric.
			id := binary.BigEndian.Uint16(l4[4:6])
			p.SrcPort, p.DstPort = id, id
			return
		}
		p.SrcPort = uint16(typ)<<8 | uint16(code)
	}
}

func isEcho(typ uint8, v6 bool) bool {
	if v6 {
		return typ == 128 || typ == 129
	}
	return typ == 8 || typ == 0
}
