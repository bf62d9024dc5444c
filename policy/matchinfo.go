package policy

import "net/netip"

// The parsed items of a match table, for the code that must know which
// packets a rule can match without classifying them: the divert rules a
// policy needs (package internal/divert). Each returns nil when the field
// is not given; items that do not parse are left out (a File from Parse
// or Load has been validated: it has none).

// PortRange is an inclusive range of ports, Lo ≤ Hi.
type PortRange struct{ Lo, Hi uint16 }

// Protocols are the protocol numbers of match.proto.
func (m *Match) Protocols() []uint8 {
	if m == nil || m.Proto == nil {
		return nil
	}
	ps := []uint8{}
	for _, s := range m.Proto {
		if p, err := parseProto(s); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// HasPorts reports whether protocol proto carries the ports that
// match.sport and match.dport match (tcp, udp, udplite, sctp).
func HasPorts(proto uint8) bool { return hasPorts(proto) }

// SrcPorts and DstPorts are the ranges of match.sport and match.dport.
func (m *Match) SrcPorts() []PortRange {
	if m == nil {
		return nil
	}
	return portRanges(m.Sport)
}

func (m *Match) DstPorts() []PortRange {
	if m == nil {
		return nil
	}
	return portRanges(m.Dport)
}

func portRanges(items []string) []PortRange {
	if items == nil {
		return nil
	}
	rs := []PortRange{}
	for _, s := range items {
		if r, err := parsePorts(s); err == nil {
			rs = append(rs, PortRange{r.lo, r.hi})
		}
	}
	return rs
}

// SrcPrefixes and DstPrefixes are the addresses and CIDRs of match.src and
// match.dst.
func (m *Match) SrcPrefixes() []netip.Prefix {
	if m == nil {
		return nil
	}
	return prefixes(m.Src)
}

func (m *Match) DstPrefixes() []netip.Prefix {
	if m == nil {
		return nil
	}
	return prefixes(m.Dst)
}

func prefixes(items []string) []netip.Prefix {
	if items == nil {
		return nil
	}
	ps := []netip.Prefix{}
	for _, s := range items {
		if p, err := parsePrefix(s); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// IPFamily is match.family's IP version: 4, 6, or 0 when not given.
func (m *Match) IPFamily() uint8 {
	if m == nil {
		return 0
	}
	switch m.Family {
	case "ipv4":
		return 4
	case "ipv6":
		return 6
	}
	return 0
}

// MarkMask is match.mark's value and mask (a mark without a mask has
// mask 0xffffffff); ok is false when match.mark is not given.
func (m *Match) MarkMask() (val, mask uint32, ok bool) {
	if m == nil || m.Mark == "" {
		return 0, 0, false
	}
	val, mask, err := parseMark(m.Mark)
	return val, mask, err == nil
}
