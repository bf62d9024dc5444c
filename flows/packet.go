// Package flows decodes raw IP packets in place and derives comparable flow
// keys from them, and keeps a bounded table of per-flow state.
//
// It is the bottom of packetshaper's import graph: it imports no other
// package of the project. Nothing here allocates per packet.
package flows

// Class says what Decode made of a packet.
type Class uint8

const (
	// Malformed: the bytes do not start with a valid IPv4 or IPv6 header
	// (shorter than the fixed header, bad version, IPv4 header length below
	// 20 or total length below the header length): packets the kernel
	// itself drops before any hook. Only Class and Length are valid.
	Malformed Class = iota
	// IPv4 packet; all fields valid.
	IPv4
	// IPv6 packet; all fields valid.
	IPv6
)

func (c Class) String() string {
	switch c {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return "malformed"
}

// IANA protocol numbers that Decode knows how to find ports (or what stands
// in for them) in.
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
	// ProtoUnknown (255, reserved by IANA) stands for the protocol of an
	// IPv6 packet whose extension header chain could not be walked to its
	// end (cut by the copy range or the capture, or running past the
	// packet), and of an IPv6 non-first fragment (whose fragment header's
	// next header the kernel ignores): such packets of an address pair
	// share one flow, whatever they claim.
	ProtoUnknown = 255
)

// Packet is a decoded IP packet. The zero value is a Malformed packet.
// Decode fills it in place; it holds no reference to the decoded bytes.
type Packet struct {
	// Class is IPv4, IPv6 or Malformed. The other fields are valid iff
	// Class is not Malformed.
	Class Class
	// Proto is the transport protocol: the IPv4 protocol field, or the IPv6
	// next header found after walking the extension headers.
	Proto uint8
	// Fragment is true for a non-first fragment (IPv4 fragment offset > 0,
	// or an IPv6 fragment header with offset > 0). Such packets carry no
	// transport header: NoPorts is true too.
	Fragment bool
	// NoPorts is true when the packet's protocol has ports (or an ICMP
	// echo identifier) that could not be read: a non-first fragment, a
	// transport header cut short (a tiny first fragment, the copy range, a
	// capture's snap length), or an IPv6 extension header chain that could
	// not be walked to its end (Proto is then ProtoUnknown). SrcPort and
	// DstPort are then 0, so the packet is keyed by its addresses and
	// protocol: it is limited like any other packet, as the
	// address-and-protocol flow, never let through unkeyed.
	NoPorts bool
	// Src and Dst are the addresses. IPv4 addresses take the first 4 bytes,
	// the rest is zero.
	Src, Dst [16]byte
	// SrcPort and DstPort are the TCP, UDP, UDP-Lite or SCTP ports. For
	// ICMP and ICMPv6 echo request/reply, both hold the echo identifier;
	// for other ICMP messages SrcPort holds type<<8|code and DstPort is 0.
	// Zero for every other protocol and for non-first fragments.
	SrcPort, DstPort uint16
	// Reply is true for what a kernel sends itself in answer to a packet
	// that came in, and nothing else can be told from the packet: a TCP
	// segment without payload with ACK or RST set and no FIN (a SYN-ACK,
	// an RST, a bare ACK), or an ICMP or ICMPv6 error (destination
	// unreachable, time exceeded, parameter problem, packet too big), not
	// a fragment. It carries no data a socket wrote; what a rule keyed by
	// uid or gid does with it when it has no owner is the rule's no-owner
	// (KeyConfig.NoOwner).
	Reply bool
	// Length is the packet's real length, never the number of bytes
	// captured: its IP header's (IPv4 total length, or IPv6 payload length
	// + 40) when that is set and agrees with the length the source knows
	// (DecodeLen's wire), else the source's, else the bytes given (see
	// DecodeLen). It is what a byte-rate limiter charges. For Malformed
	// packets it is the source's length, or len(b).
	Length int
}
