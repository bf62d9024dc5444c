package flows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"
)

// Key identifies a flow. It is a packed, comparable value with no pointers
// and no padding, so it hashes as 40 plain bytes in a Go map; tailscale's
// flowtrack records that a netip.AddrPort-based key was about twice as slow,
// and our BenchmarkKeyMap agrees (go test -run '^$' -bench KeyMap ./flows).
//
// Which fields are set depends on the KeyConfig that made it: fields a mode
// leaves out are zero, and prefixes mask the addresses.
type Key struct {
	Src, Dst [16]byte
	// SrcPort and DstPort are the ports of a FiveTuple key. A mode with
	// an owner part (ByUID, ByGID, ByMark) never keys by ports: there
	// they hold the owner, which Owner returns (a flow table entry stays
	// 160 bytes).
	SrcPort, DstPort uint16
	Proto            uint8
	// Family is 4 or 6; 0 in the zero Key, and in a key of mode NoAddr
	// (an owner alone: IPv4 and IPv6 packets of one owner are one flow).
	Family uint8
	// Mode is the KeyConfig mode that made the key; it says which of the
	// other fields are part of the identity (String uses it).
	Mode Mode
	// NoOwner: a ByUID or ByGID key of a packet whose owner is not known
	// (no local socket: forwarded or incoming, a reply the kernel made, a
	// replayed capture). All such packets of a rule share one flow, "no
	// owner": never a way around the limit.
	NoOwner bool
}

// Owner is the owner part of a key whose Mode has one: the socket's uid or
// gid, or the mark under the KeyConfig's MarkMask; 0 in the address modes
// and with NoOwner.
func (k *Key) Owner() uint32 {
	if k.Mode.By() == 0 {
		return 0
	}
	return uint32(k.SrcPort)<<16 | uint32(k.DstPort)
}

func (k *Key) setOwner(v uint32) { k.SrcPort, k.DstPort = uint16(v>>16), uint16(v) }

// keySize is the size of a Key; equal and hash read it as words.
const keySize = 40

// A Key must be keySize bytes with no padding: equal compares its bytes.
var _ [keySize - unsafe.Sizeof(Key{})]byte
var _ [unsafe.Sizeof(Key{}) - keySize]byte

// bytes is k's memory as bytes (alignment 1, so checkptr is content).
func (k *Key) bytes() *[keySize]byte { return (*[keySize]byte)(unsafe.Pointer(k)) }

// equal is k == *o, in five word compares: the compiler's 40-byte
// comparison calls memequal. BenchmarkKeyEqual (go test -run '^$' -bench
// KeyEqual -count 4 ./flows) gave, with four word and five field compares
// before NoOwner took the last byte, 7.0–8.1 ns for equal against
// 12.9–16.7 ns for == here (0.48–0.54×): about 6 ns off a hit, which costs
// 18–27 ns at 10 000 flows in BenchmarkTableIndex.
func (k *Key) equal(o *Key) bool {
	a, b := k.bytes(), o.bytes()
	le := binary.LittleEndian
	return le.Uint64(a[0:]) == le.Uint64(b[0:]) && le.Uint64(a[8:]) == le.Uint64(b[8:]) &&
		le.Uint64(a[16:]) == le.Uint64(b[16:]) && le.Uint64(a[24:]) == le.Uint64(b[24:]) &&
		le.Uint64(a[32:]) == le.Uint64(b[32:])
}

// Mode chooses which packet fields make up a flow's identity, as iptables
// hashlimit's --hashlimit-mode does, and, beyond hashlimit, the packet's
// owner: its address part (FiveTuple, Src, Dst, SrcDst, or NoAddr) is or'ed
// with an owner part (none, ByUID, ByGID or ByMark). NoAddr goes with an
// owner only, and FiveTuple with none (a 5-tuple is one socket, so one
// owner): "uid", "uid+dst", "mark+src-dst".
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
	// NoAddr keys by no address: the owner part alone.
	NoAddr
)

// Owner parts of a Mode.
const (
	// ByUID keys by the uid of the local socket that sent the packet
	// (NFQUEUE's NFQA_UID); packets without one share a flow (NoOwner).
	ByUID Mode = (iota + 1) << 4
	// ByGID keys by the socket's gid (NFQA_GID), as ByUID.
	ByGID
	// ByMark keys by the packet's mark under KeyConfig.MarkMask.
	ByMark

	addrPart Mode = 0x0f
)

var modeNames = [...]string{FiveTuple: "5tuple", Src: "src", Dst: "dst", SrcDst: "src-dst"}

var ownerNames = [...]string{ByUID >> 4: "uid", ByGID >> 4: "gid", ByMark >> 4: "mark"}

// Addr is m's address part: FiveTuple, Src, Dst, SrcDst or NoAddr.
func (m Mode) Addr() Mode { return m & addrPart }

// By is m's owner part: 0, ByUID, ByGID or ByMark.
func (m Mode) By() Mode { return m &^ addrPart }

func (m Mode) valid() bool {
	a, by := m.Addr(), m.By()>>4
	switch {
	case by == 0:
		return a <= SrcDst
	case int(by) < len(ownerNames):
		return a != FiveTuple && a <= NoAddr
	}
	return false
}

func (m Mode) String() string {
	if !m.valid() {
		return "Mode(" + strconv.Itoa(int(m)) + ")"
	}
	a, by := m.Addr(), m.By()>>4
	switch {
	case by == 0:
		return modeNames[a]
	case a == NoAddr:
		return ownerNames[by]
	}
	return ownerNames[by] + "+" + modeNames[a]
}

// ParseMode parses "5tuple", "src", "dst" or "src-dst"; "uid", "gid" or
// "mark"; or an owner and an address part joined by "+" ("uid+dst",
// "src-dst+mark").
func ParseMode(s string) (Mode, error) {
	one := func(s string) (Mode, bool) {
		for m, n := range modeNames {
			if s == n {
				return Mode(m), true
			}
		}
		for by, n := range ownerNames {
			if n != "" && s == n {
				return Mode(by << 4), true
			}
		}
		return 0, false
	}
	bad := func() (Mode, error) {
		return 0, fmt.Errorf("unknown key mode %q (want 5tuple, src, dst or src-dst; uid, gid or mark; or one of these joined to src, dst or src-dst, as \"uid+dst\")", s)
	}
	a, b, two := strings.Cut(s, "+")
	m1, ok := one(a)
	if !ok {
		return bad()
	}
	if !two {
		if m1.By() != 0 {
			return m1 | NoAddr, nil
		}
		return m1, nil
	}
	m2, ok := one(b)
	if !ok {
		return bad()
	}
	if m1.By() == 0 {
		m1, m2 = m2, m1
	}
	if m1.By() == 0 || m2.By() != 0 {
		return 0, fmt.Errorf("bad key mode %q: join one owner (uid, gid or mark) and one address part (src, dst or src-dst)", s)
	}
	if m2 == FiveTuple {
		return 0, fmt.Errorf("bad key mode %q: a 5-tuple is one socket, so one owner: key by 5tuple, or by %s with src, dst or src-dst", s, ownerNames[m1>>4])
	}
	return m1 | m2, nil
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
	// MarkMask is the part of the mark a ByMark mode keys by (0: all of
	// it): with 0xff00, marks 0x1200 and 0x12ff are one flow.
	MarkMask uint32
	// NoOwner is what a ByUID or ByGID mode does with a packet whose
	// owner is not known (Ownerless).
	NoOwner NoOwner
}

// NoOwner is what a rule keyed by uid or gid does with the packets that
// have no owner: the replies the kernel makes itself (a SYN-ACK, an RST,
// the ACK of a TIME_WAIT socket, an ICMP error: no full socket, so NFQUEUE
// gives no uid), and on INPUT or FORWARD every packet.
type NoOwner uint8

const (
	// NoOwnerAcceptReplies (the default) accepts the kernel's replies
	// (Packet.Reply: no payload, nothing a user's socket wrote, one per
	// packet that came in) and limits every other ownerless packet as
	// one flow, "no owner". A SYN flood's RSTs then cannot starve a
	// server's SYN-ACKs, and no user's data gets around its limit.
	NoOwnerAcceptReplies NoOwner = iota
	// NoOwnerLimit limits every ownerless packet as one flow, "no
	// owner", the replies too (the strictest: one user's limit for all
	// that no user sent).
	NoOwnerLimit
	// NoOwnerAccept accepts every ownerless packet: the rule limits the
	// packets of known owners only.
	NoOwnerAccept
	// NoOwnerKeyByDst limits ownerless packets as one flow per
	// destination address (under the rule's destination prefixes), "no
	// owner dst ADDR": a flood towards one peer cannot starve the others.
	NoOwnerKeyByDst
)

var noOwnerNames = [...]string{NoOwnerAcceptReplies: "accept-replies", NoOwnerLimit: "limit", NoOwnerAccept: "accept", NoOwnerKeyByDst: "key-by-dst"}

// NoOwnerNames are the names ParseNoOwner takes, the default first.
func NoOwnerNames() []string { return noOwnerNames[:] }

// ParseNoOwner parses a NoOwner's name ("accept-replies", "limit",
// "accept", "key-by-dst").
func ParseNoOwner(s string) (NoOwner, error) {
	for i, n := range noOwnerNames {
		if s == n {
			return NoOwner(i), nil
		}
	}
	return 0, fmt.Errorf("unknown value %q (want %s)", s, strings.Join(noOwnerNames[:], ", "))
}

func (n NoOwner) String() string {
	if int(n) < len(noOwnerNames) {
		return noOwnerNames[n]
	}
	return "NoOwner(" + strconv.Itoa(int(n)) + ")"
}

// Ownerless applies c.NoOwner to k, the "no owner" key (k.NoOwner) that
// KeyTo and SetOwner made of p: it reports whether p is accepted without
// a limit, and with NoOwnerKeyByDst rewrites k to the flow of p's
// destination. It does not allocate.
func (c *KeyConfig) Ownerless(k *Key, p *Packet) (accept bool) {
	switch c.NoOwner {
	case NoOwnerAcceptReplies:
		return p.Reply
	case NoOwnerAccept:
		return true
	case NoOwnerKeyByDst:
		k.Mode = c.Mode.By() | Dst
		k.Src, k.SrcPort, k.DstPort, k.Proto = [16]byte{}, 0, 0, 0
		k.Dst, k.Family = p.Dst, 4
		dp := c.DstPrefix4
		if p.Class == IPv6 {
			k.Family, dp = 6, c.DstPrefix6
		}
		mask(&k.Dst, dp, k.Family)
	}
	return false
}

// Validate reports a prefix length out of range.
func (c *KeyConfig) Validate() error {
	if !c.Mode.valid() {
		return fmt.Errorf("unknown key mode %d", c.Mode)
	}
	if c.NoOwner != 0 && (int(c.NoOwner) >= len(noOwnerNames) || (c.Mode.By() != ByUID && c.Mode.By() != ByGID)) {
		return fmt.Errorf("no-owner %v needs a uid or gid key, not %v", c.NoOwner, c.Mode)
	}
	if c.MarkMask != 0 && c.Mode.By() != ByMark {
		return fmt.Errorf("a mark mask needs a mark key (key = \"mark\", \"mark+dst\", ...), not %v", c.Mode)
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
// It does not allocate. An owner mode gets the key of a packet with no
// owner and mark 0: see SetOwner.
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
	// ByUID and ByGID (with any address part) are the modes below
	// ByMark from ByUID: their keys start as "no owner" (SetOwner).
	k.NoOwner = uint8(c.Mode-ByUID) < uint8(ByMark-ByUID)
	switch c.Mode.Addr() {
	case Src:
		k.Dst, k.SrcPort, k.DstPort, k.Proto = [16]byte{}, 0, 0, 0
	case Dst:
		k.Src, k.SrcPort, k.DstPort, k.Proto = [16]byte{}, 0, 0, 0
	case SrcDst:
		k.SrcPort, k.DstPort, k.Proto = 0, 0, 0
	case NoAddr:
		k.Src, k.Dst, k.SrcPort, k.DstPort, k.Proto, k.Family = [16]byte{}, [16]byte{}, 0, 0, 0, 0
	}
}

// SetOwner writes the owner part of k, a key c made with KeyTo, for a
// packet with mark and, when known (the packet came from a local socket),
// its socket's uid and gid. An unknown owner leaves k the "no owner" flow
// of a ByUID or ByGID mode. Nothing changes in an address mode.
func (c *KeyConfig) SetOwner(k *Key, mark, uid, gid uint32, known bool) {
	switch c.Mode.By() {
	case ByUID:
		if known {
			k.setOwner(uid)
			k.NoOwner = false
		}
	case ByGID:
		if known {
			k.setOwner(gid)
			k.NoOwner = false
		}
	case ByMark:
		m := c.MarkMask
		if m == 0 {
			m = ^uint32(0)
		}
		k.setOwner(mark & m)
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
	by := k.owner()
	if k.Mode.Addr() == NoAddr {
		return by
	}
	if by != "" {
		by += " "
	}
	return by + k.addrString()
}

// owner is the owner part of k for people: "uid 1001", "gid 100", "mark
// 0x10", "no owner"; "" for an address mode.
func (k Key) owner() string {
	if k.NoOwner {
		return "no owner"
	}
	switch k.Mode.By() {
	case ByUID:
		return "uid " + strconv.FormatUint(uint64(k.Owner()), 10)
	case ByGID:
		return "gid " + strconv.FormatUint(uint64(k.Owner()), 10)
	case ByMark:
		return "mark 0x" + strconv.FormatUint(uint64(k.Owner()), 16)
	}
	return ""
}

func (k Key) addrString() string {
	src, dst := k.Addrs()
	if k.Family == 0 {
		return "invalid"
	}
	switch k.Mode.Addr() {
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
	if k.Mode.Addr() == NoAddr {
		return s
	}
	by := k.owner()
	if by != "" {
		by += " "
	}
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
	switch k.Mode.Addr() {
	case Src:
		return by + "src " + withLen(src, sp)
	case Dst:
		return by + "dst " + withLen(dst, dp)
	case SrcDst:
		return by + withLen(src, sp) + " > " + withLen(dst, dp)
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
