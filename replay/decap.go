package replay

import (
	"encoding/binary"
	"strconv"

	"github.com/gopacket/gopacket/layers"
)

// Link types that gopacket's layers package does not name (or names
// differently) but that replay decapsulates.
const (
	linkTypeNull     layers.LinkType = 0   // BSD loopback, host byte order family
	linkTypeEthernet layers.LinkType = 1   // Ethernet II / 802.3
	linkTypeRawBSD   layers.LinkType = 12  // DLT_RAW on most BSDs
	linkTypeRawOBSD  layers.LinkType = 14  // DLT_RAW on OpenBSD
	linkTypeRaw      layers.LinkType = 101 // LINKTYPE_RAW
	linkTypeLoop     layers.LinkType = 108 // OpenBSD loopback, network byte order family
	linkTypeSLL      layers.LinkType = 113 // Linux cooked capture v1
	linkTypeIPv4     layers.LinkType = 228 // LINKTYPE_IPV4
	linkTypeIPv6     layers.LinkType = 229 // LINKTYPE_IPV6
	linkTypeNFLOG    layers.LinkType = 239 // Linux NFLOG
	linkTypeSLL2     layers.LinkType = 276 // Linux cooked capture v2
)

// Supported reports whether replay can find the IP header in frames of
// link type lt.
func Supported(lt layers.LinkType) bool {
	switch lt {
	case linkTypeNull, linkTypeEthernet, linkTypeRawBSD, linkTypeRawOBSD, linkTypeRaw,
		linkTypeLoop, linkTypeSLL, linkTypeIPv4, linkTypeIPv6, linkTypeNFLOG, linkTypeSLL2:
		return true
	}
	return false
}

// LinkTypeName is lt's libpcap name when replay or gopacket knows it, else
// "LINKTYPE_<n>"; used in error messages.
func LinkTypeName(lt layers.LinkType) string {
	switch lt {
	case linkTypeNull:
		return "NULL"
	case linkTypeEthernet:
		return "EN10MB"
	case linkTypeRawBSD, linkTypeRawOBSD, linkTypeRaw:
		return "RAW"
	case linkTypeLoop:
		return "LOOP"
	case linkTypeSLL:
		return "LINUX_SLL"
	case linkTypeIPv4:
		return "IPV4"
	case linkTypeIPv6:
		return "IPV6"
	case linkTypeNFLOG:
		return "NFLOG"
	case linkTypeSLL2:
		return "LINUX_SLL2"
	}
	if s := lt.String(); s != "UnknownLinkType" {
		return s
	}
	return "LINKTYPE_" + strconv.Itoa(int(lt))
}

// Ethertypes that Decap follows.
const (
	etherIPv4     = 0x0800
	etherIPv6     = 0x86dd
	etherVLAN     = 0x8100 // 802.1Q C-tag
	etherQinQ     = 0x88a8 // 802.1ad S-tag
	etherQinQOld1 = 0x9100 // pre-standard QinQ
	etherQinQOld2 = 0x9200
	etherMPLS     = 0x8847
	etherMPLSMC   = 0x8848
	etherPPPoE    = 0x8864 // PPPoE session stage
)

// maxTags bounds how many VLAN tags and MPLS labels Decap walks through:
// a frame made of nothing but tags ends there instead of being walked to
// its end (which would still be bounded, but 16 is far more than real
// stacks use).
const maxTags = 16

// Decap finds the IP header in a captured frame of link type lt (which
// must be Supported). It returns the bytes from the IP header on and
// ip = true when the frame carries IPv4 or IPv6; those bytes are handed to
// the shaper as they are, so a frame that says IP but is cut short gives a
// short (possibly empty) slice that the shaper classes as malformed.
// ip = false means the frame carries something else (ARP, LLDP, STP, IPX,
// an unknown BSD address family, …): such frames are not limited.
//
// Decap is hand-written rather than gopacket's DecodingLayerParser because
// it only needs to skip headers, not decode them: see BenchmarkDecap for
// the difference. It never allocates and never panics.
func Decap(lt layers.LinkType, b []byte) (pkt []byte, ip bool) {
	switch lt {
	case linkTypeEthernet:
		if len(b) < 14 {
			return b[len(b):], true // cut before the ethertype: malformed
		}
		return etherPayload(binary.BigEndian.Uint16(b[12:14]), b[14:])
	case linkTypeRaw, linkTypeRawBSD, linkTypeRawOBSD, linkTypeIPv4, linkTypeIPv6:
		return b, true
	case linkTypeSLL:
		// 16-byte header; the protocol (an ethertype for the cases we
		// handle) is its last two bytes.
		if len(b) < 16 {
			return b[len(b):], true
		}
		return etherPayload(binary.BigEndian.Uint16(b[14:16]), b[16:])
	case linkTypeSLL2:
		// 20-byte header starting with the protocol type.
		if len(b) < 20 {
			return b[len(b):], true
		}
		return etherPayload(binary.BigEndian.Uint16(b[0:2]), b[20:])
	case linkTypeNull, linkTypeLoop:
		return nullPayload(b)
	case linkTypeNFLOG:
		return nflogPayload(b)
	}
	return nil, false
}

// etherPayload follows an ethertype through VLAN tags, MPLS labels and
// PPPoE to IPv4 or IPv6.
func etherPayload(et uint16, b []byte) ([]byte, bool) {
	for range maxTags {
		switch et {
		case etherIPv4, etherIPv6:
			return b, true
		case etherVLAN, etherQinQ, etherQinQOld1, etherQinQOld2:
			// TCI (2 bytes), then the next ethertype.
			if len(b) < 4 {
				return b[len(b):], true
			}
			et = binary.BigEndian.Uint16(b[2:4])
			b = b[4:]
		case etherMPLS, etherMPLSMC:
			return mplsPayload(b)
		case etherPPPoE:
			// 6-byte PPPoE header, then the 2-byte PPP protocol.
			if len(b) < 8 {
				return b[len(b):], true
			}
			switch binary.BigEndian.Uint16(b[6:8]) {
			case 0x0021, 0x0057: // PPP IPv4, IPv6
				return b[8:], true
			}
			return nil, false
		default:
			if et <= 1500 {
				// An 802.3 length: LLC follows. Only SNAP with a zero OUI
				// carries an ethertype (RFC 1042); plain LLC (STP, …) is
				// not IP.
				if len(b) >= 8 && b[0] == 0xaa && b[1] == 0xaa && b[2] == 0x03 &&
					b[3] == 0 && b[4] == 0 && b[5] == 0 {
					et = binary.BigEndian.Uint16(b[6:8])
					b = b[8:]
					continue
				}
			}
			return nil, false
		}
	}
	return nil, false
}

// mplsPayload skips an MPLS label stack. MPLS does not say what follows
// the bottom label; like tcpdump and Wireshark we look at the first nibble
// (4 or 6), so a pseudowire with a control word (nibble 0) is not IP.
func mplsPayload(b []byte) ([]byte, bool) {
	for range maxTags {
		if len(b) < 4 {
			return b[len(b):], true
		}
		bottom := b[2]&1 != 0
		b = b[4:]
		if bottom {
			if len(b) == 0 {
				return b, true
			}
			switch b[0] >> 4 {
			case 4, 6:
				return b, true
			}
			return nil, false
		}
	}
	return nil, false
}

// nullPayload handles DLT_NULL (family in the capturing host's byte order)
// and DLT_LOOP (network byte order). Writers get the byte order wrong
// often enough that both accept both: family values are small, so a value
// with its low 16 bits zero is byte-swapped.
func nullPayload(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return b[len(b):], true
	}
	fam := binary.LittleEndian.Uint32(b[:4])
	if fam&0xffff == 0 {
		fam = binary.BigEndian.Uint32(b[:4])
	}
	switch fam {
	case 2: // AF_INET everywhere
		return b[4:], true
	case 24, 28, 30: // AF_INET6: Net/OpenBSD, FreeBSD, Darwin (as tcpdump and Wireshark)
		return b[4:], true
	}
	return nil, false
}

// NFLOG: a 4-byte header (family, version, resource id) and then TLVs
// whose length and type are in the capturing host's byte order; the
// packet is the value of the NFULA_PAYLOAD TLV.
const nfulaPayload = 9

func nflogPayload(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return b[len(b):], true
	}
	switch b[0] {
	case 2, 10: // AF_INET, AF_INET6
	default:
		return nil, false
	}
	b = b[4:]
	for len(b) >= 4 {
		// Types are small (NFULA_* < 256), so the byte that is zero tells
		// the byte order; little endian is the common case.
		var n, typ int
		if b[3] == 0 && b[2] != 0 || b[2] == 0 && b[3] == 0 {
			n, typ = int(binary.LittleEndian.Uint16(b[0:2])), int(binary.LittleEndian.Uint16(b[2:4]))
		} else {
			n, typ = int(binary.BigEndian.Uint16(b[0:2])), int(binary.BigEndian.Uint16(b[2:4]))
		}
		if n < 4 || n > len(b) {
			return b[len(b):], true // TLV runs past the frame: malformed
		}
		if typ&0x7fff == nfulaPayload {
			return b[4:n], true
		}
		n = (n + 3) &^ 3
		if n >= len(b) {
			break
		}
		b = b[n:]
	}
	// No payload TLV: an NFLOG message without the packet.
	return b[len(b):], true
}
