package flows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// Key identifies a flow. It is a packed, comparable value with no pointers,
// so it hashes as 40 plain bytes in a Go map; tailscale's flowtrack records
// that a netip.AddrPort-based key was about twice as slow, and our
// BenchmarkKeyMap agrees (go test -run '^$' -bench KeyMap ./flows).
//
// Which fields are set depends on the KeyConfig that made it: fields a mode
// leaves out are zero, and prefixes mask the addresses.
type Key struct {
	Src, Dst         [16]byte
	SrcPort, DstPort uint16
	Proto            uint8
	// Family is 4 or 6; 0 only in the zero Key.
	Family uint8
	// Mode is the KeyConfig mode that made the key; it says which of the
	// other fields are part of the identity (String uses it).
	Mode Mode
}

// equal is k == *o, in five word compares: the compiler's 40-byte
// comparison calls memequal. BenchmarkKeyEqual (go test -run '^$' -bench
// KeyEqual -count 4 ./flows) gives 7.0–8.1 ns for equal against 12.9–16.7 ns
// for == here (0.48–0.54×, one noisy pair 0.81×): about 6 ns off a hit,
// which costs 18–27 ns at 10 000 flows in BenchmarkTableIndex.
func (k *Key) equal(o *Key) bool {
	le := binary.LittleEndian
	return le.Uint64(k.Src[0:]) == le.Uint64(o.Src[0:]) && le.Uint64(k.Src[8:]) == le.Uint64(o.Src[8:]) &&
		le.Uint64(k.Dst[0:]) == le.Uint64(o.Dst[0:]) && le.Uint64(k.Dst[8:]) == le.Uint64(o.Dst[8:]) &&
		k.SrcPort == o.SrcPort && k.DstPort == o.DstPort && k.Proto == o.Proto && k.Family == o.Family && k.Mode == o.Mode
}

// Mode chooses which packet fields make up a flow's identity, as iptables
// hashlimit's --hashlimit-mode does.
type Mode uint8

const (
	// FiveTuple keys by source and destination address and port and by
	// protocol (hashlimit's srcip,srcport,dstip,dstport plus protocol).
	FiveTuple Mode = iota
	// Src keys by source address only (hashlimit's srcip).
	Src
	// Dst keys by destination address only (hashlimit's dstip).
	Dst
	// SrcDst keys by the address pair (hashlimit's srcip,dstip).
	SrcDst
)

var modeNames = [...]string{FiveTuple: "5tuple", Src: "src", Dst: "dst", SrcDst: "src-dst"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "5tuple", "src", "dst" or "src-dst".
func ParseMode(s string) (Mode, error) {
	for m, n := range modeNames {
		if s == n {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown key mode %q (want 5tuple, src, dst or src-dst)", s)
}

// KeyConfig says how Key derives a flow key from a packet. The zero value
// keys by the full 5-tuple, one flow per direction.
type KeyConfig struct {
	Mode Mode
	// SrcPrefix4 and DstPrefix4 are prefix lengths (1–32) applied to IPv4
	// source and destination addresses, like hashlimit's
	// --hashlimit-srcmask; 0 means 32 (the whole address).
	SrcPrefix4, DstPrefix4 int
	// SrcPrefix6 and DstPrefix6 are the same for IPv6 (1–128); 0 means 128.
	// A /64 groups a host that rotates its interface identifier.
	SrcPrefix6, DstPrefix6 int
	// Symmetric makes both directions of a conversation one flow: the
	// (address, port) pairs are put in a canonical order before keying.
	// With Src or Dst mode it keys by whichever address sorts first. It
	// needs equal source and destination prefix lengths (Validate).
	Symmetric bool
}

// Validate reports a prefix length out of range.
func (c *KeyConfig) Validate() error {
	if c.Mode > SrcDst {
		return fmt.Errorf("unknown key mode %d", c.Mode)
	}
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{
		{"source IPv4 prefix", c.SrcPrefix4, 32},
		{"destination IPv4 prefix", c.DstPrefix4, 32},
		{"source IPv6 prefix", c.SrcPrefix6, 128},
		{"destination IPv6 prefix", c.DstPrefix6, 128},
	} {
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("%s /%d out of range 1-%d", f.name, f.v, f.max)
		}
	}
	full := func(v, max int) int {
		if v == 0 {
			return max
		}
		return v
	}
	if c.Symmetric && (full(c.SrcPrefix4, 32) != full(c.DstPrefix4, 32) || full(c.SrcPrefix6, 128) != full(c.DstPrefix6, 128)) {
		// Endpoints are ordered after masking: A→B masked as (A/24, B)
		// and B→A as (B/24, A) would be two flows.
		return fmt.Errorf("symmetric keys need equal source and destination prefix lengths (IPv4 /%d and /%d, IPv6 /%d and /%d)",
			full(c.SrcPrefix4, 32), full(c.DstPrefix4, 32), full(c.SrcPrefix6, 128), full(c.DstPrefix6, 128))
	}
	return nil
}

// Key returns the flow key of a decoded packet. p must not be Malformed.
// It does not allocate.
func (c *KeyConfig) Key(p *Packet) Key {
	var k Key
	c.KeyTo(&k, p)
	return k
}

// KeyTo is Key writing to *k, for the per-packet path: a Key returned by
// value is copied with wide loads right over the narrow stores that built
// it, a store-forwarding stall that cost more than the rest of keying.
func (c *KeyConfig) KeyTo(k *Key, p *Packet) {
	k.Src, k.Dst = p.Src, p.Dst
	k.SrcPort, k.DstPort, k.Proto, k.Family, k.Mode = p.SrcPort, p.DstPort, p.Proto, 4, c.Mode
	sp, dp := c.SrcPrefix4, c.DstPrefix4
	if p.Class == IPv6 {
		k.Family = 6
		sp, dp = c.SrcPrefix6, c.DstPrefix6
	}
	mask(&k.Src, sp, k.Family)
	mask(&k.Dst, dp, k.Family)
	if c.Symmetric && less(&k.Dst, k.DstPort, &k.Src, k.SrcPort) {
		k.Src, k.Dst = k.Dst, k.Src
		k.SrcPort, k.DstPort = k.DstPort, k.SrcPort
	}
	switch c.Mode {
	case Src:
		k.Dst, k.SrcPort, k.DstPort, k.Proto = [16]byte{}, 0, 0, 0
	case Dst:
		k.Src, k.SrcPort, k.DstPort, k.Proto = [16]byte{}, 0, 0, 0
	case SrcDst:
		k.SrcPort, k.DstPort, k.Proto = 0, 0, 0
	}
}

// mask keeps the first bits bits of the address (0 = all of them).
func mask(a *[16]byte, bits int, family uint8) {
	n := 16
	if family == 4 {
		n = 4
	}
	if bits <= 0 || bits >= n*8 {
		return
	}
	i := bits / 8
	a[i] &= ^byte(0xff >> (bits % 8))
	for i++; i < n; i++ {
		a[i] = 0
	}
}

func less(a *[16]byte, ap uint16, b *[16]byte, bp uint16) bool {
	if *a != *b {
		for i := range a {
			if a[i] != b[i] {
				return a[i] < b[i]
			}
		}
	}
	return ap < bp
}

// Addrs returns the key's addresses as netip.Addr values (the zero Addr for
// a field the key mode leaves out).
func (k Key) Addrs() (src, dst netip.Addr) {
	conv := func(a [16]byte) netip.Addr {
		if k.Family == 4 {
			return netip.AddrFrom4([4]byte(a[:4]))
		}
		return netip.AddrFrom16(a)
	}
	return conv(k.Src), conv(k.Dst)
}

// ProtoName returns the name of an IP protocol number: "tcp", "udp",
// "icmp", …, "unknown" for ProtoUnknown, or the number itself.
func ProtoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMP:
		return "icmp"
	case ProtoICMPv6:
		return "icmpv6"
	case ProtoSCTP:
		return "sctp"
	case ProtoUDPLite:
		return "udplite"
	case ProtoUnknown:
		return "unknown"
	}
	return strconv.Itoa(int(p))
}

func hasPorts(p uint8) bool {
	switch p {
	case ProtoTCP, ProtoUDP, ProtoUDPLite, ProtoSCTP, ProtoICMP, ProtoICMPv6:
		return true
	}
	return false
}

// String formats the key for people: "udp 10.0.0.1:5000 > 10.0.0.2:9000",
// "tcp [2001:db8::1]:443 > [2001:db8::2]:50000", "47 10.0.0.1 > 10.0.0.2"
// for a protocol without ports, and in the address-only modes "src
// 10.0.0.0", "dst 10.0.0.2", "10.0.0.1 > 10.0.0.2". Non-first fragments
// show port 0. Not for the per-packet
// path: it allocates.
func (k Key) String() string {
	src, dst := k.Addrs()
	if k.Family == 0 {
		return "invalid"
	}
	switch k.Mode {
	case Src:
		return "src " + src.String()
	case Dst:
		return "dst " + dst.String()
	case SrcDst:
		return src.String() + " > " + dst.String()
	}
	if !hasPorts(k.Proto) {
		return ProtoName(k.Proto) + " " + src.String() + " > " + dst.String()
	}
	return ProtoName(k.Proto) + " " + netip.AddrPortFrom(src, k.SrcPort).String() + " > " + netip.AddrPortFrom(dst, k.DstPort).String()
}

// Format is Key.String with the prefix lengths of c shown on masked
// addresses: "src 10.1.2.0/24" rather than "src 10.1.2.0". k must have been
// made by c.
func (c *KeyConfig) Format(k Key) string {
	s := k.String()
	sp, dp, full := c.SrcPrefix4, c.DstPrefix4, 32
	if k.Family == 6 {
		sp, dp, full = c.SrcPrefix6, c.DstPrefix6, 128
	}
	if (sp <= 0 || sp >= full) && (dp <= 0 || dp >= full) {
		return s
	}
	src, dst := k.Addrs()
	withLen := func(a netip.Addr, bits int) string {
		if bits <= 0 || bits >= full {
			return a.String()
		}
		return netip.PrefixFrom(a, bits).String()
	}
	switch k.Mode {
	case Src:
		return "src " + withLen(src, sp)
	case Dst:
		return "dst " + withLen(dst, dp)
	case SrcDst:
		return withLen(src, sp) + " > " + withLen(dst, dp)
	}
	ep := func(a netip.Addr, bits int, port uint16) string {
		if !hasPorts(k.Proto) {
			return withLen(a, bits)
		}
		if bits <= 0 || bits >= full {
			return netip.AddrPortFrom(a, port).String()
		}
		return withLen(a, bits) + ":" + strconv.Itoa(int(port))
	}
	return ProtoName(k.Proto) + " " + ep(src, sp, k.SrcPort) + " > " + ep(dst, dp, k.DstPort)
}
