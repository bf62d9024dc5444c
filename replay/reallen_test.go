package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/shaper"
)

// expectByteBucket is how many of packets of sizes[i] bytes arriving at
// ts[i] an exact byte token bucket passes (capacity burst bytes, full at
// the first packet, refilled continuously at rate bytes per second; a
// packet passes iff the bucket holds its size, which is then taken), in
// exact rational arithmetic, independently of the shaper's code.
func expectByteBucket(ts []int64, sizes []int, rate, burst int64) int {
	tokens, capacity := big.NewRat(burst, 1), big.NewRat(burst, 1)
	n := 0
	last := ts[0]
	for i, t := range ts {
		tokens.Add(tokens, big.NewRat((t-last)*rate, 1e9))
		if tokens.Cmp(capacity) > 0 {
			tokens.Set(capacity)
		}
		last = t
		if c := big.NewRat(int64(sizes[i]), 1); tokens.Cmp(c) >= 0 {
			tokens.Sub(tokens, c)
			n++
		}
	}
	return n
}

// realLenFrames are Ethernet frames whose IP packet is size bytes long, of
// the kinds a snap length cuts: IPv4 UDP (its header says size), IPv4 TCP
// of a TSO/GRO ("big TCP") capture (total length 0), and IPv6 UDP with a
// hop-by-hop header and payload length 0 (a jumbogram's, or big TCP's).
// Each kind has its own source port, so its own flow.
func realLenFrames(size int) map[string][]byte {
	v4 := func(proto byte, total uint16, sport uint16) []byte {
		ip := make([]byte, size)
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], total)
		copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(ip[20:], sport)
		binary.BigEndian.PutUint16(ip[22:], 9000)
		return cat(ethHdr, be16(0x0800), ip)
	}
	ip6 := make([]byte, size)
	ip6[0], ip6[6], ip6[7] = 0x60, 0, 64 // next header: hop-by-hop; payload length 0
	ip6[8+15], ip6[24+15] = 1, 2
	hbh := ip6[40:]
	hbh[0], hbh[1] = 17, 0 // UDP next, 8 bytes: a PadN option fills it
	hbh[2], hbh[3] = 1, 4
	binary.BigEndian.PutUint16(hbh[8:], 3003)
	binary.BigEndian.PutUint16(hbh[10:], 9000)
	return map[string][]byte{
		"ipv4":         v4(17, uint16(size), 3001),
		"ipv4-total-0": v4(6, 0, 3002),
		"ipv6-plen-0":  cat(ethHdr, be16(0x86dd), ip6),
	}
}

// TestSnapCutChargesOriginalLength replays captures whose records were
// cut by a 68-byte snap length (pcap and pcapng) through a byte rate: each
// packet is charged its real length — the IP header's when it says one,
// else the record's original length less the link-layer header —, never
// the 54 bytes of IP packet the record holds. Each flow's accepted count
// equals an exact byte bucket's over the real sizes (and differs from one
// over the copied sizes, so the test tells the two apart).
func TestSnapCutChargesOriginalLength(t *testing.T) {
	const size, snap, n = 1400, 68, 100 // 68: the IPv6 packet's ports are in the record
	const rate, burst = 20_000, 6_000   // bytes/s: about 14 real packets/s, 370 copied ones
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	frames := realLenFrames(size)
	kinds := []string{"ipv4", "ipv4-total-0", "ipv6-plen-0"}
	var ts []int64
	for k := range n {
		ts = append(ts, t0+int64(k)*10_000_000) // 100 packets/s per flow
	}
	real, copied := make([]int, n), make([]int, n)
	for i := range real {
		real[i], copied[i] = size, snap-14
	}
	want := expectByteBucket(ts, real, rate, burst)
	if cut := expectByteBucket(ts, copied, rate, burst); cut == want {
		t.Fatalf("the copied sizes give the same count (%d): the test shows nothing", want)
	}
	for _, format := range []string{"pcap", "pcapng"} {
		var buf bytes.Buffer
		var write func(ci gopacket.CaptureInfo, data []byte) error
		if format == "pcap" {
			w := pcapgo.NewWriterNanos(&buf)
			if err := w.WriteFileHeader(snap, layers.LinkTypeEthernet); err != nil {
				t.Fatal(err)
			}
			write = w.WritePacket
		} else {
			w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet, SnapLength: snap, TimestampResolution: 9}, pcapgo.DefaultNgWriterOptions)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Flush()
			write = func(ci gopacket.CaptureInfo, data []byte) error {
				if err := w.WritePacket(ci, data); err != nil {
					return err
				}
				return w.Flush()
			}
		}
		for _, at := range ts {
			for j, kind := range kinds {
				f := frames[kind]
				ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, at+int64(j)), CaptureLength: snap, Length: len(f)}
				if err := write(ci, f[:snap]); err != nil {
					t.Fatal(err)
				}
			}
		}
		eng, err := shaper.New(shaper.Config{Bytes: true, Rate: rate, Burst: burst})
		if err != nil {
			t.Fatal(err)
		}
		r := New(eng, Options{})
		if err := r.Replay("cut."+format, bytes.NewReader(buf.Bytes()), 0); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		got := map[string]uint64{}
		for _, f := range r.Flows(0) {
			got[f.Flow] = f.Accepted
		}
		for j, kind := range kinds {
			flow := fmt.Sprintf("udp 10.0.0.1:%d > 10.0.0.2:9000", 3001+j)
			switch kind {
			case "ipv4-total-0":
				flow = "tcp 10.0.0.1:3002 > 10.0.0.2:9000"
			case "ipv6-plen-0":
				flow = "udp [::1]:3003 > [::2]:9000"
			}
			if got[flow] != uint64(want) {
				t.Errorf("%s, %s (%s): accepted %d of %d 1400-byte packets cut to %d bytes, want %d (charged 1400 bytes each); flows %v",
					format, kind, flow, got[flow], n, snap, want, got)
			}
		}
	}
}
