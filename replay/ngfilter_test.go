package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// ngBuild builds pcapng blocks in one byte order, for crafted captures.
type ngBuild struct {
	o   binary.AppendByteOrder
	buf bytes.Buffer
}

func (b *ngBuild) u16(v uint16) []byte { return b.o.AppendUint16(nil, v) }
func (b *ngBuild) u32(v uint32) []byte { return b.o.AppendUint32(nil, v) }

// block appends a block of type typ whose body is the parts, padded to 4.
func (b *ngBuild) block(typ uint32, parts ...[]byte) *ngBuild {
	body := bytes.Join(parts, nil)
	body = append(body, make([]byte, (4-len(body)%4)%4)...)
	total := uint32(12 + len(body))
	b.buf.Write(b.u32(typ))
	b.buf.Write(b.u32(total))
	b.buf.Write(body)
	b.buf.Write(b.u32(total))
	return b
}

// opt is an option (also a name record: same layout), padded; opts ends a
// list of them.
func (b *ngBuild) opt(code uint16, v []byte) []byte {
	return append(append(append(b.u16(code), b.u16(uint16(len(v)))...), v...), make([]byte, (4-len(v)%4)%4)...)
}

func (b *ngBuild) opts(os ...[]byte) []byte { return append(bytes.Join(os, nil), 0, 0, 0, 0) }

func (b *ngBuild) shb(opts ...[]byte) *ngBuild {
	return b.block(0x0a0d0d0a, b.u32(0x1a2b3c4d), b.u16(1), b.u16(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, b.opts(opts...))
}

func (b *ngBuild) idb(lt uint16, snap uint32, opts ...[]byte) *ngBuild {
	return b.block(1, b.u16(lt), b.u16(0), b.u32(snap), b.opts(opts...))
}

// epb: an enhanced packet block of interface i at ts (the interface's
// units), original length orig.
func (b *ngBuild) epb(i uint32, ts uint64, data []byte, orig uint32, opts ...[]byte) *ngBuild {
	pad := make([]byte, (4-len(data)%4)%4)
	return b.block(6, b.u32(i), b.u32(uint32(ts>>32)), b.u32(uint32(ts)), b.u32(uint32(len(data))), b.u32(orig), data, pad, b.opts(opts...))
}

// craftedNg is a capture of every block kind, in both byte orders: a
// section with options; interfaces with every option (long name and
// comment, description, filter, OS, resolution, offset, custom options);
// name-resolution blocks with NUL-filled names; statistics, decryption
// secrets, custom and unknown blocks; enhanced packet blocks with
// options, a simple packet block and an obsolete packet block.
func craftedNg() []byte {
	var out bytes.Buffer
	frame := cat(ethHdr, be16(0x0800), ipv4)
	for _, o := range []binary.AppendByteOrder{binary.LittleEndian, binary.BigEndian} {
		b := &ngBuild{o: o}
		long := bytes.Repeat([]byte{'x'}, 300)
		b.shb(b.opt(1, []byte("a comment")), b.opt(2, []byte("hardware")), b.opt(3, long))
		b.idb(1, 65535, b.opt(2, []byte("eth0")), b.opt(1, long), b.opt(3, []byte("desc")), b.opt(11, []byte{0, 'u', 'd', 'p'}),
			b.opt(12, []byte("Linux")), b.opt(9, []byte{9}), b.opt(0x0bad, long))
		b.idb(101, 65535, b.opt(2, append([]byte("lo-"), long...)), b.opt(9, []byte{6}), b.opt(14, b.o.AppendUint64(nil, 1)))
		nuls := make([]byte, 4+1000)
		copy(nuls, []byte{192, 0, 2, 1})
		b.block(4, b.opt(1, nuls), b.opt(2, make([]byte, 16+40)), b.opt(99, []byte("??")), b.u32(0))
		b.epb(0, 1_700_000_000_000_000_001, frame, uint32(len(frame)), b.opt(1, []byte("packet comment")), b.opt(2, b.u32(1)), b.opt(0x4bad, long))
		b.block(5, b.u32(0), b.u32(0), b.u32(1), b.opts(b.opt(4, b.o.AppendUint64(nil, 7))))
		b.block(10, b.u32(0x544c534b), b.u32(5), []byte("keys!"))
		b.block(0xbad, b.u32(32473), long)
		b.block(0x40000bad, b.u32(32473), long)
		b.block(0x1234, long)
		b.epb(1, 1_700_000_000_000_001, ipv4, 1400)
		b.block(3, b.u32(uint32(len(frame))), frame) // simple packet: interface 0
		b.block(2, b.u16(1), b.u16(0), b.u32(0), b.u32(5), b.u32(uint32(len(ipv4))), b.u32(uint32(len(ipv4))), ipv4, b.opts(b.opt(1, []byte("old"))))
		out.Write(b.buf.Bytes())
	}
	return out.Bytes()
}

type ngRec struct {
	data               []byte
	ts                 int64
	capLen, origLen, i int
	lt                 layers.LinkType
	iface              string
}

// TestNgFilterKeepsPackets: a capture of every block kind reads through
// Reader (pcapng through ngFilter) as the same packets — bytes,
// timestamps, lengths, interfaces, link types, interface names — as
// through gopacket's reader alone.
func TestNgFilterKeepsPackets(t *testing.T) {
	capture := craftedNg()
	var want []ngRec
	ng, err := pcapgo.NewNgReader(bytes.NewReader(capture), pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, ci, err := ng.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		intf, _ := ng.Interface(ci.InterfaceIndex)
		want = append(want, ngRec{data, ci.Timestamp.UnixNano(), ci.CaptureLength, ci.Length, ci.InterfaceIndex, ci.AncillaryData[0].(layers.LinkType), intf.Name})
	}
	if len(want) != 8 {
		t.Fatalf("gopacket reads %d packets, want 8", len(want))
	}
	rd, err := NewReader(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		data, ci, lt, err := rd.Next()
		if err == io.EOF {
			if i != len(want) {
				t.Errorf("read %d packets, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatalf("packet %d: %v", i+1, err)
		}
		if i >= len(want) {
			t.Fatalf("more than %d packets", len(want))
		}
		w := want[i]
		name := w.iface[:min(len(w.iface), maxIfName)]
		got := ngRec{bytes.Clone(data), ci.Timestamp.UnixNano(), ci.CaptureLength, ci.Length, ci.InterfaceIndex, lt, rd.InterfaceName(ci.InterfaceIndex)}
		if !bytes.Equal(got.data, w.data) || got.ts != w.ts || got.capLen != w.capLen || got.origLen != w.origLen || got.i != w.i || got.lt != w.lt || got.iface != name {
			t.Errorf("packet %d: %+v, want %+v (name %q)", i+1, got, w, name)
		}
	}
}

// TestNgFilterErrors: blocks whose lengths are inconsistent are refused
// with a one-line error, and too many interfaces in a section too.
func TestNgFilterErrors(t *testing.T) {
	le := &ngBuild{o: binary.LittleEndian}
	le.shb().idb(1, 0)
	head := bytes.Clone(le.buf.Bytes())
	frame := cat(ethHdr, be16(0x0800), ipv4)
	mk := func(f func(b *ngBuild)) []byte {
		b := &ngBuild{o: binary.LittleEndian}
		b.buf.Write(head)
		f(b)
		return b.buf.Bytes()
	}
	many := &ngBuild{o: binary.LittleEndian}
	many.shb()
	for range maxInterfaces + 1 {
		many.idb(1, 0)
	}
	many.epb(0, 1, frame, uint32(len(frame)))
	for _, tc := range []struct {
		name, err string
		data      []byte
	}{
		{"block length not a multiple of 4", "length 30 is not a multiple of 4", mk(func(b *ngBuild) {
			b.buf.Write(b.u32(0x1234))
			b.buf.Write(b.u32(30))
			b.buf.Write(make([]byte, 22))
		})},
		{"block shorter than its header", "length 8 is not a multiple of 4 of at least 12", mk(func(b *ngBuild) {
			b.buf.Write(b.u32(4))
			b.buf.Write(b.u32(8))
		})},
		{"captured length past the block", "captured length 500 runs past its block", mk(func(b *ngBuild) {
			b.epb(0, 1, frame, uint32(len(frame)))
			binary.LittleEndian.PutUint32(b.buf.Bytes()[b.buf.Len()-4-4-2-len(frame)-4-4:], 500)
		})},
		{"option past its interface", "option 2 of 200 bytes runs past its block", mk(func(b *ngBuild) {
			b.block(1, b.u16(1), b.u16(0), b.u32(0), b.u16(2), b.u16(200), []byte("eth0"), b.u32(0))
		})},
		{"truncated", "truncated", mk(func(b *ngBuild) {
			b.epb(0, 1, frame, uint32(len(frame)))
			b.buf.Truncate(b.buf.Len() - 6)
		})},
		{"too many interfaces", "more than 4096 interfaces in a pcapng section", many.buf.Bytes()},
	} {
		n, err := readAll(bytes.NewReader(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.err) || strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%s: read %d, error %v; want one line containing %q", tc.name, n, err, tc.err)
		}
	}
}

// gz compresses b.
func gz(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// BenchmarkReadPcapng reads a pcapng of 64-byte Ethernet packets through
// Reader (ngFilter in front of gopacket's reader) and through gopacket's
// reader alone: what the filter costs a packet.
func BenchmarkReadPcapng(b *testing.B) {
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		b.Fatal(err)
	}
	frame := cat(ethHdr, be16(0x0800), ipv4, make([]byte, 22))
	const n = 100_000
	for i := range n {
		ci := gopacketCI(int64(i)*1000, len(frame))
		if err := w.WritePacket(ci, frame); err != nil {
			b.Fatal(err)
		}
	}
	w.Flush()
	capture := buf.Bytes()
	b.Run("reader", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			rd, err := NewReader(bytes.NewReader(capture))
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, _, _, err := rd.Next(); err != nil {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/packet")
	})
	b.Run("gopacket", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ng, err := pcapgo.NewNgReader(bytes.NewReader(capture), pcapgo.NgReaderOptions{WantMixedLinkType: true})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, _, err := ng.ZeroCopyReadPacketData(); err != nil {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/packet")
	})
}

func gopacketCI(ns int64, n int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Unix(0, ns), CaptureLength: n, Length: n}
}

// TestNgFilterLargeInterfaces: interfaces of 400 KB of options each, each
// followed by a packet, read within the reader's per-packet budget
// whatever the chunks the input comes in (plain, gzip'd fast or small):
// the filter never reads ahead past more than the block at hand.
func TestNgFilterLargeInterfaces(t *testing.T) {
	b := &ngBuild{o: binary.LittleEndian}
	b.shb()
	val := bytes.Repeat([]byte{'a'}, 65532)
	frame := cat(ethHdr, be16(0x0800), ipv4)
	const n = 20
	for i := range n {
		b.idb(1, 0, b.opt(2, val), b.opt(1, val), b.opt(3, val), b.opt(11, val), b.opt(12, val), b.opt(0x0bad, val))
		b.epb(uint32(i), uint64(i), frame, uint32(len(frame)))
	}
	for _, level := range []int{gzip.NoCompression - 1, gzip.BestSpeed, gzip.BestCompression} {
		data := b.buf.Bytes()
		if level >= gzip.BestSpeed {
			var out bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&out, level)
			zw.Write(data)
			zw.Close()
			data = out.Bytes()
		}
		if got, err := readAll(bytes.NewReader(data)); got != n || err != nil {
			t.Errorf("gzip level %d: read %d packets, error %v; want %d", level, got, err, n)
		}
	}
}
