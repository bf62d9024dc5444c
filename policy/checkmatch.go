package policy

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/packetshaper/packetshaper/flows"
)

var protoNames = map[string]uint8{
	"tcp": flows.ProtoTCP, "udp": flows.ProtoUDP, "icmp": flows.ProtoICMP,
	"icmpv6": flows.ProtoICMPv6, "sctp": flows.ProtoSCTP, "udplite": flows.ProtoUDPLite,
}

// hasPorts reports whether proto carries ports that sport and dport match.
func hasPorts(proto uint8) bool {
	switch proto {
	case flows.ProtoTCP, flows.ProtoUDP, flows.ProtoUDPLite, flows.ProtoSCTP:
		return true
	}
	return false
}

func (f *File) checkMatch(i int, m *Match, errs *errList) matchSpec {
	var s matchSpec
	if m == nil {
		return s
	}
	bad := func(field string, j int, format string, args ...any) {
		errs.add(f.errAt(i, field, j, format, args...))
	}
	// list reports an empty list and calls item on each item.
	list := func(field string, items []string, item func(j int, v string)) {
		if items != nil && len(items) == 0 {
			bad(field, -1, "empty list: it would match nothing; give at least one item or leave it out")
		}
		for j, v := range items {
			item(j, v)
		}
	}
	if s.family = m.IPFamily(); s.family == 0 && m.Family != "" {
		bad("match.family", -1, "unknown family %q (want ipv4 or ipv6)", m.Family)
	}
	addrs := func(field string, items []string) []netip.Prefix {
		ps := parseItems(list, bad, field, items, parsePrefix)
		fam := [2]bool{}
		for _, p := range ps {
			fam[b2i(p.Addr().Is6())] = true
		}
		if len(ps) > 0 && len(ps) == len(items) && s.family != 0 && !fam[b2i(s.family == 6)] {
			bad(field, -1, "never matches: no item is an IPv%d address or CIDR, and match.family is %q", s.family, m.Family)
		}
		return ps
	}
	s.src = addrs("match.src", m.Src)
	s.dst = addrs("match.dst", m.Dst)
	s.proto = parseItems(list, bad, "match.proto", m.Proto, parseProto)
	portProto := slices.ContainsFunc(s.proto, hasPorts)
	ports := func(field string, items []string) []portRange {
		rs := parseItems(list, bad, field, items, parsePorts)
		if items != nil && len(s.proto) > 0 && len(s.proto) == len(m.Proto) && !portProto {
			bad(field, -1, "never matches: no protocol in match.proto has ports (tcp, udp, udplite, sctp)")
		}
		return rs
	}
	s.sport = ports("match.sport", m.Sport)
	s.dport = ports("match.dport", m.Dport)
	ifaces := func(field string, items []string) []string {
		list(field, items, func(j int, v string) {
			if !validIfName(v) {
				bad(field, j, "bad interface name %q", v)
			}
		})
		return items
	}
	s.iif = ifaces("match.iif", m.Iif)
	s.oif = ifaces("match.oif", m.Oif)
	if m.Mark != "" {
		v, mask, err := parseMark(m.Mark)
		if err != nil {
			bad("match.mark", -1, "%w", err)
		}
		s.hasMark, s.mark, s.markMask = true, v, mask
	}
	s.uid = parseItems(list, bad, "match.uid", m.UID, parseIDs)
	s.gid = parseItems(list, bad, "match.gid", m.GID, parseIDs)
	checkL4(m, &s, bad, list)
	if m.Queue != nil && len(m.Queue) == 0 {
		bad("match.queue", -1, "empty list: it would match nothing; give at least one item or leave it out")
	}
	for j, q := range m.Queue {
		if q < 0 || q > math.MaxUint16 {
			bad("match.queue", j, "queue %d out of range 0-65535", q)
			continue
		}
		s.queue = append(s.queue, uint16(q))
	}
	return s
}

// badFunc reports an error at a match field's item j (the field for j < 0).
type badFunc = func(field string, j int, format string, args ...any)

// listFunc reports an empty list and calls item on each item.
type listFunc = func(field string, items []string, item func(j int, v string))

// parseItems is field's items, each parsed by parse (after list's checks);
// bad reports an item parse refuses, which is left out.
func parseItems[T any](list listFunc, bad badFunc, field string, items []string, parse func(string) (T, error)) []T {
	var out []T
	list(field, items, func(j int, v string) {
		x, err := parse(v)
		if err != nil {
			bad(field, j, "%w", err)
			return
		}
		out = append(out, x)
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parsePrefix parses an address (one host) or a CIDR whose address has no
// bits set past its length.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("bad CIDR %q (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")", s)
		}
		if m := p.Masked(); m != p {
			return p, fmt.Errorf("bad CIDR %q: bits set past /%d (did you mean %q?)", s, p.Bits(), m.String())
		}
		if p.Addr().Is4In6() {
			// Masked, so at least /96: the IPv4 prefix it stands for.
			v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			return p, fmt.Errorf("bad CIDR %q: an IPv4-mapped IPv6 prefix never matches IPv4 packets, which carry IPv4 addresses (write %q)", s, v4.String())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("bad address %q (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")", s)
	}
	if a.Is4In6() {
		return netip.Prefix{}, fmt.Errorf("bad address %q: an IPv4-mapped IPv6 address never matches IPv4 packets, which carry IPv4 addresses (write %q)", s, a.Unmap().String())
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parseProto(s string) (uint8, error) {
	if p, ok := protoNames[s]; ok {
		return p, nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil || n < 0 || n > 255:
		return 0, fmt.Errorf("unknown protocol %q (want tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254)", s)
	case n == flows.ProtoUnknown:
		return 0, fmt.Errorf("protocol 255 is reserved: packetshaper means by it a protocol it could not find (want 0-254)")
	}
	return uint8(n), nil
}

func parsePorts(s string) (portRange, error) {
	port := func(v string) (uint16, bool) {
		if v == "" || len(v) > 5 {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > math.MaxUint16 {
			return 0, false
		}
		return uint16(n), true
	}
	a, b, err := parseRange(s, "port", `a port 0-65535 or a range such as "8000-8100"`, port)
	return portRange{a, b}, err
}

// parseRange parses s, a number (num's) or a "lo-hi" range of them, as
// lo, hi; its errors name s as a what and say that want is wanted.
func parseRange[T uint16 | uint32](s, what, want string, num func(string) (T, bool)) (T, T, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, ok := num(lo)
	b := a
	if isRange && ok {
		b, ok = num(hi)
	}
	if !ok {
		return 0, 0, fmt.Errorf("bad %s %q (want %s)", what, s, want)
	}
	if a > b {
		return 0, 0, fmt.Errorf("bad %s range %q: %d is above %d", what, s, a, b)
	}
	return a, b, nil
}

// parseIDs parses a uid or gid, or a "lo-hi" range of them.
func parseIDs(s string) (idRange, error) {
	id := func(v string) (uint32, bool) {
		if v == "" || len(v) > 10 || v[0] == '+' {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err == nil
	}
	a, b, err := parseRange(s, "id", `a number 0-4294967295 or a range such as "1000-1999"; names are not looked up`, id)
	return idRange{a, b}, err
}

// validIfName reports whether s can name a Linux network interface
// (dev_valid_name: 1-15 bytes, no "/", ":" or white space, not "." or "..").
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
