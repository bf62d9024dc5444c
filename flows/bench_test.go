package flows

import (
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// BenchmarkDecode compares our in-place decoder with gopacket's
// DecodingLayerParser (its fastest, allocation-free mode) on the same
// packets. gopacket is what we use for captures; the per-packet path
// decodes by hand because this benchmark shows the difference matters at
// the ≤ 100 ns/packet budget.
func BenchmarkDecode(b *testing.B) {
	pkts := map[string][]byte{
		"ipv4-udp":     udp4(b, "10.0.0.1", "10.0.0.2", 5000, 9000, 64),
		"ipv6-tcp":     tcp6(b, "2001:db8::1", "2001:db8::2", 1, 2),
		"ipv6-ext-udp": ext6(b, []uint8{0, 60}, 1, 2, 0),
	}
	for name, pkt := range pkts {
		b.Run("flows/"+name, func(b *testing.B) {
			b.ReportAllocs()
			var p Packet
			var c KeyConfig
			var sink Key
			for b.Loop() {
				p.Decode(pkt)
				sink = c.Key(&p)
			}
			_ = sink
		})
		b.Run("gopacket/"+name, func(b *testing.B) {
			b.ReportAllocs()
			var (
				ip4  layers.IPv4
				ip6  layers.IPv6
				ext  layers.IPv6ExtensionSkipper // its DecodingLayer for hop-by-hop, routing, destination options
				tcp  layers.TCP
				udp  layers.UDP
				pl   gopacket.Payload
				sink Key
			)
			first := layers.LayerTypeIPv4
			if pkt[0]>>4 == 6 {
				first = layers.LayerTypeIPv6
			}
			parser := gopacket.NewDecodingLayerParser(first, &ip4, &ip6, &ext, &tcp, &udp, &pl)
			parser.IgnoreUnsupported = true
			decoded := make([]gopacket.LayerType, 0, 8)
			for b.Loop() {
				_ = parser.DecodeLayers(pkt, &decoded)
				var k Key
				for _, lt := range decoded {
					switch lt {
					case layers.LayerTypeIPv4:
						copy(k.Src[:], ip4.SrcIP)
						copy(k.Dst[:], ip4.DstIP)
						k.Proto = uint8(ip4.Protocol)
					case layers.LayerTypeIPv6:
						copy(k.Src[:], ip6.SrcIP)
						copy(k.Dst[:], ip6.DstIP)
					case layers.LayerTypeTCP:
						k.SrcPort, k.DstPort, k.Proto = uint16(tcp.SrcPort), uint16(tcp.DstPort), 6
					case layers.LayerTypeUDP:
						k.SrcPort, k.DstPort, k.Proto = uint16(udp.SrcPort), uint16(udp.DstPort), 17
					}
				}
				sink = k
			}
			_ = sink
		})
	}
}

// BenchmarkKeyMap compares map lookups keyed by our packed Key with a key
// built from netip.AddrPort values, over 10 000 flows.
func BenchmarkKeyMap(b *testing.B) {
	type apKey struct {
		src, dst netip.AddrPort
		proto    uint8
	}
	const n = 10000
	packed := make(map[Key]int, n)
	ap := make(map[apKey]int, n)
	keys := make([]Key, n)
	apKeys := make([]apKey, n)
	for i := range n {
		keys[i] = k(i)
		s, d := keys[i].Addrs()
		apKeys[i] = apKey{netip.AddrPortFrom(s, 1), netip.AddrPortFrom(d, 2), 17}
		packed[keys[i]] = i
		ap[apKeys[i]] = i
	}
	b.Run("packed", func(b *testing.B) {
		i, sum := 0, 0
		for b.Loop() {
			sum += packed[keys[i%n]]
			i++
		}
	})
	b.Run("netip", func(b *testing.B) {
		i, sum := 0, 0
		for b.Loop() {
			sum += ap[apKeys[i%n]]
			i++
		}
	})
}
