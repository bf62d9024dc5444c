package replay

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ipv4 and ipv6 are minimal packets whose first byte Decap's callers see.
var (
	ipv4 = append([]byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}, 0x04, 0xd2, 0x00, 0x35, 0, 8, 0, 0)
	ipv6 = append(append([]byte{0x60, 0, 0, 0, 0, 8, 17, 64}, make([]byte, 32)...), 0x04, 0xd2, 0x00, 0x35, 0, 8, 0, 0)
)

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

var ethHdr = make([]byte, 12) // MAC addresses

func TestDecap(t *testing.T) {
	mpls := func(label uint32, bottom bool) []byte {
		v := label<<12 | 64
		if bottom {
			v |= 1 << 8
		}
		return binary.BigEndian.AppendUint32(nil, v)
	}
	sll := func(proto uint16) []byte { return cat(make([]byte, 14), be16(proto)) }
	sll2 := func(proto uint16) []byte { return cat(be16(proto), make([]byte, 18)) }
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	tlv := func(o binary.AppendByteOrder, typ uint16, v []byte) []byte {
		b := o.AppendUint16(nil, uint16(4+len(v)))
		b = o.AppendUint16(b, typ)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	tlvLE := func(typ uint16, v []byte) []byte { return tlv(binary.LittleEndian, typ, v) }
	tlvBE := func(typ uint16, v []byte) []byte { return tlv(binary.BigEndian, typ, v) }
	tests := []struct {
		name  string
		lt    layers.LinkType
		frame []byte
		want  []byte // nil with ip=false: not IP
		ip    bool
	}{
		{"ethernet ipv4", 1, cat(ethHdr, be16(0x0800), ipv4), ipv4, true},
		{"ethernet ipv6", 1, cat(ethHdr, be16(0x86dd), ipv6), ipv6, true},
		{"802.1Q", 1, cat(ethHdr, be16(0x8100), be16(10), be16(0x0800), ipv4), ipv4, true},
		{"802.1ad+802.1Q", 1, cat(ethHdr, be16(0x88a8), be16(20), be16(0x8100), be16(10), be16(0x86dd), ipv6), ipv6, true},
		{"9100 triple", 1, cat(ethHdr, be16(0x9100), be16(1), be16(0x9200), be16(2), be16(0x8100), be16(3), be16(0x0800), ipv4), ipv4, true},
		{"mpls 2 labels", 1, cat(ethHdr, be16(0x8847), mpls(1, false), mpls(2, true), ipv4), ipv4, true},
		{"mpls ipv6", 1, cat(ethHdr, be16(0x8848), mpls(1, true), ipv6), ipv6, true},
		{"mpls control word", 1, cat(ethHdr, be16(0x8847), mpls(1, true), make([]byte, 4), ipv4), nil, false},
		{"vlan mpls", 1, cat(ethHdr, be16(0x8100), be16(5), be16(0x8847), mpls(1, true), ipv4), ipv4, true},
		{"pppoe ipv4", 1, cat(ethHdr, be16(0x8864), []byte{0x11, 0, 0, 1, 0, 30, 0, 0x21}, ipv4), ipv4, true},
		{"pppoe lcp", 1, cat(ethHdr, be16(0x8864), []byte{0x11, 0, 0, 1, 0, 30, 0xc0, 0x21}, ipv4), nil, false},
		{"llc snap", 1, cat(ethHdr, be16(uint16(8+len(ipv4))), []byte{0xaa, 0xaa, 3, 0, 0, 0, 8, 0}, ipv4), ipv4, true},
		{"llc stp", 1, cat(ethHdr, be16(38), []byte{0x42, 0x42, 3}, make([]byte, 35)), nil, false},
		{"arp", 1, cat(ethHdr, be16(0x0806), make([]byte, 28)), nil, false},
		{"lldp", 1, cat(ethHdr, be16(0x88cc), make([]byte, 28)), nil, false},
		{"ethernet short", 1, make([]byte, 13), []byte{}, true},
		{"vlan short", 1, cat(ethHdr, be16(0x8100), []byte{0}), []byte{}, true},
		{"tag loop", 1, cat(ethHdr, bytes.Repeat(cat(be16(0x8100), be16(0)), 40)), nil, false},
		{"mpls no bottom", 1, cat(ethHdr, be16(0x8847), bytes.Repeat(mpls(1, false), 40)), nil, false},
		{"mpls empty payload", 1, cat(ethHdr, be16(0x8847), mpls(1, true)), []byte{}, true},
		{"raw 101", 101, ipv4, ipv4, true},
		{"raw 12", 12, ipv6, ipv6, true},
		{"raw 14", 14, ipv4, ipv4, true},
		{"ipv4 228", 228, ipv4, ipv4, true},
		{"ipv6 229", 229, ipv6, ipv6, true},
		{"sll ipv4", 113, cat(sll(0x0800), ipv4), ipv4, true},
		{"sll vlan", 113, cat(sll(0x8100), be16(3), be16(0x86dd), ipv6), ipv6, true},
		{"sll arp", 113, cat(sll(0x0806), make([]byte, 28)), nil, false},
		{"sll short", 113, make([]byte, 15), []byte{}, true},
		{"sll2 ipv6", 276, cat(sll2(0x86dd), ipv6), ipv6, true},
		{"sll2 short", 276, make([]byte, 19), []byte{}, true},
		{"null le inet", 0, cat(le32(2), ipv4), ipv4, true},
		{"null be inet", 0, cat(be32(2), ipv4), ipv4, true},
		{"null darwin inet6", 0, cat(le32(30), ipv6), ipv6, true},
		{"null freebsd inet6", 0, cat(le32(28), ipv6), ipv6, true},
		{"null openbsd inet6", 0, cat(le32(24), ipv6), ipv6, true},
		{"null other", 0, cat(le32(7), ipv4), nil, false},
		{"null short", 0, []byte{2, 0}, []byte{}, true},
		{"loop be", 108, cat(be32(24), ipv6), ipv6, true},
		{"loop le", 108, cat(le32(2), ipv4), ipv4, true},
		{"nflog le", 239, cat([]byte{2, 0, 0, 1}, tlvLE(1, []byte{8, 0, 3, 0}), tlvLE(10, []byte("pfx")), tlvLE(9, ipv4)), ipv4, true},
		{"nflog be", 239, cat([]byte{10, 0, 0, 1}, tlvBE(1, []byte{0x86, 0xdd, 3, 0}), tlvBE(9, ipv6)), ipv6, true},
		{"nflog bridge", 239, cat([]byte{7, 0, 0, 1}, tlvLE(9, ipv4)), nil, false},
		{"nflog no payload", 239, cat([]byte{2, 0, 0, 1}, tlvLE(10, []byte("pfx"))), []byte{}, true},
		{"nflog tlv too long", 239, cat([]byte{2, 0, 0, 1}, []byte{0xff, 0, 9, 0}, ipv4), []byte{}, true},
		{"nflog tlv too short", 239, cat([]byte{2, 0, 0, 1}, []byte{2, 0, 9, 0}, ipv4), []byte{}, true},
	}
	for _, tt := range tests {
		if !Supported(tt.lt) {
			t.Errorf("%s: Supported(%d) = false", tt.name, tt.lt)
		}
		got, ip := Decap(tt.lt, tt.frame)
		if ip != tt.ip || !bytes.Equal(got, tt.want) || (tt.ip && got == nil) {
			t.Errorf("%s: Decap(%d, % x) = % x, %v; want % x, %v", tt.name, tt.lt, tt.frame, got, ip, tt.want, tt.ip)
		}
	}
}

func TestSupported(t *testing.T) {
	for _, lt := range []layers.LinkType{105, 127, 147, 9, 50, 192} {
		if Supported(lt) {
			t.Errorf("Supported(%d) = true", lt)
		}
	}
	if got := LinkTypeName(147); got != "LINKTYPE_147" {
		t.Errorf("LinkTypeName(147) = %q", got)
	}
	if got := LinkTypeName(276); got != "LINUX_SLL2" {
		t.Errorf("LinkTypeName(276) = %q", got)
	}
}

func TestDecapNoAllocs(t *testing.T) {
	frames := []struct {
		lt layers.LinkType
		b  []byte
	}{
		{1, cat(ethHdr, be16(0x88a8), be16(20), be16(0x8100), be16(10), be16(0x86dd), ipv6)},
		{113, cat(make([]byte, 14), be16(0x0800), ipv4)},
		{239, cat([]byte{2, 0, 0, 1}, []byte{byte(4 + len(ipv4)), 0, 9, 0}, ipv4)},
	}
	for _, f := range frames {
		if n := testing.AllocsPerRun(100, func() { Decap(f.lt, f.b) }); n != 0 {
			t.Errorf("Decap(%d) allocates %v times", f.lt, n)
		}
	}
}

// benchFrames is a mix of what captures hold: plain Ethernet IPv4 and
// IPv6, 802.1Q and QinQ.
var benchFrames = [][]byte{
	cat(ethHdr, be16(0x0800), ipv4),
	cat(ethHdr, be16(0x86dd), ipv6),
	cat(ethHdr, be16(0x8100), be16(10), be16(0x0800), ipv4),
	cat(ethHdr, be16(0x88a8), be16(20), be16(0x8100), be16(10), be16(0x86dd), ipv6),
}

// BenchmarkDecap compares Decap with gopacket's DecodingLayerParser
// doing the same job (find the IPv4/IPv6 header under Ethernet and VLAN
// tags): docs/design.md cites the ratio.
func BenchmarkDecap(b *testing.B) {
	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; b.Loop(); i++ {
			p, _ := Decap(1, benchFrames[i&3])
			n += len(p)
		}
		_ = n
	})
	b.Run("gopacket", func(b *testing.B) {
		b.ReportAllocs()
		var (
			eth layers.Ethernet
			q   layers.Dot1Q
			v4  layers.IPv4
			v6  layers.IPv6
		)
		p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &q, &v4, &v6)
		p.IgnoreUnsupported = true
		decoded := make([]gopacket.LayerType, 0, 8)
		n := 0
		for i := 0; b.Loop(); i++ {
			// Like Decap, stop at the IP layer: its Contents+Payload is
			// what the shaper needs.
			_ = p.DecodeLayers(benchFrames[i&3], &decoded)
			for _, lt := range decoded {
				switch lt {
				case layers.LayerTypeIPv4:
					n += len(v4.Contents)
				case layers.LayerTypeIPv6:
					n += len(v6.Contents)
				}
			}
		}
		_ = n
	})
}
