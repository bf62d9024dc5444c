package flows

import "encoding/binary"

// Decode fills p from b, which must start at the IP header (as NFQUEUE
// delivers packets, and as link-layer decapsulation leaves them). It never
// panics and never allocates. Bytes that are not a well-formed IPv4 or IPv6
// packet give Class == Malformed.
//
// What counts as malformed is deliberately narrow: a packet is malformed when
// its IP header cannot be read (too short, wrong version, IPv4 header length
// below 20 or past the end, IPv6 extension header chain running past the
// end), or when a first fragment or unfragmented packet is too short to hold
// the ports of a protocol that has them. A packet that is merely captured
// shorter than its header says (NFQUEUE's copy range, a capture's snaplen) is
// not malformed as long as the headers we read are present.
//
// Fragments: only the first fragment carries the transport header. A
// non-first fragment (offset > 0) decodes with Fragment = true and zero ports,
// so in 5-tuple mode it counts against the flow (src, dst, proto, 0, 0) — the
// address+protocol flow — and never against a port-keyed flow whose ports
// it cannot show. An attacker cannot use fragments to escape a limit: they
// share one address-pair flow.
func (p *Packet) Decode(b []byte) {
	*p = Packet{Length: len(b)}
	if len(b) < 1 {
		return
	}
	switch b[0] >> 4 {
	case 4:
		p.decode4(b)
	case 6:
		p.decode6(b)
	}
	if p.Class == Malformed {
		*p = Packet{Length: len(b)}
	}
}

func (p *Packet) decode4(b []byte) {
	if len(b) < 20 {
		return
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || len(b) < ihl {
		return
	}
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if total < ihl {
		// TSO/GRO "big TCP" packets carry total length 0; trust the
		// captured length then, anything else shorter than the header is
		// malformed.
		if total != 0 {
			return
		}
		total = len(b)
	}
	proto := b[9]
	frag := binary.BigEndian.Uint16(b[6:8])
	offset := frag & 0x1fff
	copy(p.Src[:4], b[12:16])
	copy(p.Dst[:4], b[16:20])
	p.Proto = proto
	p.Length = total
	if offset != 0 {
		p.Fragment = true
		p.Class = IPv4
		return
	}
	// Ports are read only from within the packet's stated length, never
	// from link-layer padding or bytes past it.
	if p.ports(proto, b[ihl:min(len(b), total)], false) {
		p.Class = IPv4
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

// maxExtHeaders bounds the walk of an IPv6 extension header chain, so a
// packet made only of extension headers costs a bounded amount of work.
const maxExtHeaders = 16

func (p *Packet) decode6(b []byte) {
	if len(b) < 40 {
		return
	}
	copy(p.Src[:], b[8:24])
	copy(p.Dst[:], b[24:40])
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	p.Length = 40 + plen
	if plen == 0 {
		// Jumbogram (hop-by-hop jumbo option) or big TCP: the 16-bit
		// field can't say; charge what we were given.
		p.Length = len(b)
	}
	next := b[6]
	rest := b[40:min(len(b), p.Length)]
	for i := 0; ; i++ {
		if i == maxExtHeaders {
			return
		}
		switch next {
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts:
			if len(rest) < 8 {
				return
			}
			n := (int(rest[1]) + 1) * 8
			if len(rest) < n {
				return
			}
			next, rest = rest[0], rest[n:]
			continue
		case ipv6AH:
			// RFC 4302: payload length in 4-octet units, minus 2.
			if len(rest) < 8 {
				return
			}
			n := (int(rest[1]) + 2) * 4
			if len(rest) < n {
				return
			}
			next, rest = rest[0], rest[n:]
			continue
		case ipv6Fragment:
			if len(rest) < 8 {
				return
			}
			offset := binary.BigEndian.Uint16(rest[2:4]) >> 3
			next, rest = rest[0], rest[8:]
			if offset != 0 {
				p.Proto = next
				p.Fragment = true
				p.Class = IPv6
				return
			}
			continue
		}
		break
	}
	p.Proto = next
	if next == ipv6NoNext {
		p.Class = IPv6
		return
	}
	if p.ports(next, rest, true) {
		p.Class = IPv6
	}
}

// ports reads the transport ports (or what stands in for them) of proto from
// l4 and reports whether the header was long enough. Protocols without ports
// always succeed with zero ports.
func (p *Packet) ports(proto uint8, l4 []byte, v6 bool) bool {
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoUDPLite, ProtoSCTP:
		// The ports are the first four bytes of all four headers. A
		// first fragment too short to hold them is malformed (RFC 1858's
		// tiny-fragment attack): it must not escape its flow's limit.
		if len(l4) < 4 {
			return false
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:2])
		p.DstPort = binary.BigEndian.Uint16(l4[2:4])
	case ProtoICMP, ProtoICMPv6:
		if (proto == ProtoICMPv6) != v6 {
			// ICMP in IPv6 or ICMPv6 in IPv4: no ports to trust, key by
			// addresses and protocol.
			return true
		}
		if len(l4) < 4 {
			return false
		}
		typ, code := l4[0], l4[1]
		if isEcho(typ, v6) {
			if len(l4) < 8 {
				return false
			}
			// Request and reply share the identifier, which stands
			// for both ports: a ping session is one flow per
			// direction, and one flow with --symmetric.
			id := binary.BigEndian.Uint16(l4[4:6])
			p.SrcPort, p.DstPort = id, id
			return true
		}
		p.SrcPort = uint16(typ)<<8 | uint16(code)
	}
	return true
}

func isEcho(typ uint8, v6 bool) bool {
	if v6 {
		return typ == 128 || typ == 129
	}
	return typ == 8 || typ == 0
}
