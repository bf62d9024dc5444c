package flows

import (
	"fmt"
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

// BenchmarkTable measures Table.Get (BenchmarkTableIndex compares its
// index with a Go map's):
//
//   - hit/flows=N: packets cycle through N held flows in order (the
//     cache-unfriendly case at a million);
//
//   - churn: every packet is a new flow at a full table of 10 000, so each
//     Get evicts;
//
//   - flood: a full table of 10 000 where 9 packets in 10 are new one-packet
//     flows and 1 in 10 belongs to one of 100 flows that keep sending.
//
//     go test -run '^$' -bench 'Table$' -benchmem ./flows
func BenchmarkTable(b *testing.B) {
	type val = flowState
	for _, n := range []int{1, 10_000, 1_000_000} {
		keys := make([]Key, n)
		for i := range keys {
			keys[i] = k(i)
		}
		b.Run(fmt.Sprintf("hit/flows=%d", n), func(b *testing.B) {
			tb := NewTable[val](n, 60e9)
			now := int64(1)
			for i := range keys {
				tb.Get(&keys[i], now)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += 100
				v, _ := tb.Get(&keys[i], now)
				v.a[0]++
				if i++; i == n {
					i = 0
				}
			}
		})
	}
	const full = 10_000
	b.Run("churn", func(b *testing.B) {
		tb := NewTable[val](full, 60e9)
		now := int64(1)
		i := 0
		for ; i < 2*full; i++ {
			tb.Get(kp(i), now)
		}
		key := k(0)
		b.ReportAllocs()
		for b.Loop() {
			now += 100
			key.Src[0], key.Src[1], key.Src[2], key.Src[3] = 11, byte(i>>16), byte(i>>8), byte(i)
			key.SrcPort = uint16(i >> 24)
			v, _ := tb.Get(&key, now)
			v.a[0]++
			i++
		}
	})
	b.Run("flood", func(b *testing.B) {
		tb := NewTable[val](full, 60e9)
		legit := make([]Key, 100)
		for j := range legit {
			legit[j] = k(1<<20 + j)
		}
		now := int64(1)
		i := 0
		key := k(0)
		step := func() {
			now += 100
			var p *Key
			if i%10 == 0 {
				p = &legit[(i/10)%len(legit)]
			} else {
				key.Src[0], key.Src[1], key.Src[2], key.Src[3] = 11, byte(i>>16), byte(i>>8), byte(i)
				key.SrcPort = uint16(i >> 24)
				p = &key
			}
			v, _ := tb.Get(p, now)
			v.a[0]++
			i++
		}
		for range 4 * full {
			step()
		}
		b.ReportAllocs()
		for b.Loop() {
			step()
		}
	})
}

// flowState has the size and layout of shaper's per-flow state (its flow
// type: a limiter State of five int64, a slice and two int32, then three
// uint64 counters and a uint32): 104 bytes, with a pointer for the garbage
// collector to scan.
type flowState struct {
	a       [5]int64
	log     []int64
	head, n int32
	stats   [3]uint64
	dropRun uint32
}

// BenchmarkKeyEqual compares Key.equal, the table's key comparison, with
// the compiler's == on two equal keys (the case of every hit). It loops
// over b.N, not b.Loop, which would keep equal from being inlined:
//
//	go test -run '^$' -bench KeyEqual ./flows
func BenchmarkKeyEqual(b *testing.B) {
	keys := make([]Key, 1024)
	for i := range keys {
		keys[i] = k(i)
	}
	other := make([]Key, len(keys))
	copy(other, keys)
	b.Run("equal", func(b *testing.B) {
		n, i := 0, 0
		for range b.N {
			if keys[i].equal(&other[i]) {
				n++
			}
			i = (i + 1) & 1023
		}
		sinkInt = n
	})
	b.Run("==", func(b *testing.B) {
		n, i := 0, 0
		for range b.N {
			if keys[i] == other[i] {
				n++
			}
			i = (i + 1) & 1023
		}
		sinkInt = n
	})
}

var sinkInt int
