package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// replayRSSBound is the most memory (peak RSS) replay may take for any
// capture, however crafted (issue 16): 256 MB.
const replayRSSBound = 256e6

// ngCraft writes a little-endian pcapng file, gzip-compressed, block by
// block: captures crafted the way an attacker makes a small file that
// inflates into blocks a reader might keep.
type ngCraft struct {
	f  *os.File
	zw *gzip.Writer
	le binary.AppendByteOrder
}

func newNgCraft(t *testing.T, path string) *ngCraft {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	c := &ngCraft{f: f, zw: zw, le: binary.LittleEndian}
	// Section header: byte-order magic, version 1.0, section length -1.
	c.block(0x0a0d0d0a, c.le.AppendUint32(c.le.AppendUint16(c.le.AppendUint16(c.le.AppendUint32(nil, 0x1a2b3c4d), 1), 0), 0xffffffff), c.le.AppendUint32(nil, 0xffffffff))
	return c
}

// block writes a block of type typ whose body is the parts, padded to 4.
func (c *ngCraft) block(typ uint32, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	pad := (4 - n%4) % 4
	total := uint32(12 + n + pad)
	c.zw.Write(c.le.AppendUint32(c.le.AppendUint32(nil, typ), total))
	for _, p := range parts {
		c.zw.Write(p)
	}
	c.zw.Write(make([]byte, pad))
	c.zw.Write(c.le.AppendUint32(nil, total))
}

// option is a pcapng option: code, length, value, padding.
func (c *ngCraft) option(code uint16, value []byte) []byte {
	b := c.le.AppendUint16(c.le.AppendUint16(nil, code), uint16(len(value)))
	b = append(b, value...)
	return append(b, make([]byte, (4-len(value)%4)%4)...)
}

// idb writes an interface description (raw IP) with the options given.
func (c *ngCraft) idb(opts ...[]byte) {
	parts := [][]byte{c.le.AppendUint32(c.le.AppendUint32(nil, 101), 65535)}
	parts = append(parts, opts...)
	parts = append(parts, c.le.AppendUint32(nil, 0)) // end of options
	c.block(1, parts...)
}

// epb writes an enhanced packet block on interface 0 at ns (µs
// resolution) holding a 28-byte IPv4 UDP packet from port sport.
func (c *ngCraft) epb(ns int64, sport uint16) {
	ip := make([]byte, 28)
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], 28)
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 9000)
	us := uint64(ns / 1000)
	h := c.le.AppendUint32(nil, 0)
	h = c.le.AppendUint32(h, uint32(us>>32))
	h = c.le.AppendUint32(h, uint32(us))
	h = c.le.AppendUint32(h, 28)
	h = c.le.AppendUint32(h, 28)
	c.block(6, h, ip, c.le.AppendUint32(nil, 0))
}

func (c *ngCraft) close(t *testing.T) int64 {
	t.Helper()
	if err := c.zw.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := c.f.Stat()
	if err := c.f.Close(); err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// writeNULNames writes the attacker's name-resolution capture: reps times
// a name-resolution block of 15 IPv4 records whose names are 65531 NUL
// bytes (gopacket keeps each NUL as an empty string: 16 bytes of memory
// for each byte of the file), then a packet. 1.5 MB of NULs per packet, so
// that each read stays within the reader's 1 MiB budget.
func writeNULNames(t *testing.T, path string, reps int) int64 {
	c := newNgCraft(t, path)
	c.idb()
	rec := c.le.AppendUint16(c.le.AppendUint16(nil, 1), 65535) // IPv4 record, 4 + 65531 bytes
	rec = append(rec, 192, 0, 2, 1)
	rec = append(rec, make([]byte, 65531+1)...) // the names, and padding
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range reps {
		parts := make([][]byte, 0, 16)
		for range 15 {
			parts = append(parts, rec)
		}
		parts = append(parts, make([]byte, 4)) // end of records
		c.block(4, parts...)
		c.epb(t0+int64(i)*1e6, 1000)
	}
	return c.close(t)
}

// writeBigInterfaces writes n interface descriptions, each with a 64 KB
// name, comment, description, filter and OS (gopacket keeps them all for
// the section), each followed by a packet.
func writeBigInterfaces(t *testing.T, path string, n int) int64 {
	c := newNgCraft(t, path)
	val := bytes.Repeat([]byte{'a'}, 65532)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range n {
		c.idb(c.option(2, val), c.option(1, val), c.option(3, val), c.option(11, append([]byte{0}, val[1:]...)), c.option(12, val),
			c.option(0x0bad, val)) // and a custom option
		if i%64 == 0 {
			c.block(0x40000bad, c.le.AppendUint32(nil, 32473), val) // a custom block
		}
		c.epb(t0+int64(i)*1e6, 1000)
	}
	return c.close(t)
}

// writeHeldShape writes, gzip-compressed, a pcap (raw IP, snap length
// 262144) of n packets of 262144 bytes (IPv4 total length 0, as a GRO
// capture has), from 20 flows, all within 1 s: a shaping rule delays
// nearly all of them, and --write-accepted copies each one it holds.
func writeHeldShape(t *testing.T, path string, n int) int64 {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	le := binary.LittleEndian
	const size = 262144
	h := le.AppendUint32(nil, 0xa1b23c4d)
	h = le.AppendUint16(le.AppendUint16(h, 2), 4)
	h = le.AppendUint32(le.AppendUint32(h, 0), 0)
	h = le.AppendUint32(le.AppendUint32(h, size), 101)
	zw.Write(h)
	pkt := make([]byte, size)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, 17
	copy(pkt[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(pkt[22:], 9000)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range n {
		ns := t0 + int64(i)*int64(time.Second)/int64(n)
		r := le.AppendUint32(le.AppendUint32(nil, uint32(ns/1e9)), uint32(ns%1e9))
		r = le.AppendUint32(le.AppendUint32(r, size), size)
		zw.Write(r)
		binary.BigEndian.PutUint16(pkt[20:], uint16(1000+i%20))
		zw.Write(pkt)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	f.Close()
	return st.Size()
}

// TestReplayCraftedMemory replays, through the real binary, captures
// crafted to make a reader keep what the file does not pay for, each a
// small gzip file, and checks replay's peak RSS stays under 256 MB: a
// pcapng of name-resolution blocks whose names are NUL bytes, one of 64 KB
// interface options (and custom options and blocks), and a shaping replay
// with --write-accepted of 256 KiB records that all wait.
func TestReplayCraftedMemory(t *testing.T) {
	skipRSSTest(t, "builds the binary and replays captures that inflate to gigabytes")
	bin := buildShaper(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		write   func(path string) int64
		args    []string
		packets uint64
	}{
		{"nul-names.pcapng.gz", func(p string) int64 { return writeNULNames(t, p, 100) }, nil, 100},
		{"big-interfaces.pcapng.gz", func(p string) int64 { return writeBigInterfaces(t, p, 1500) }, nil, 1500},
		{"held-shape.pcap.gz", func(p string) int64 { return writeHeldShape(t, p, 2000) },
			[]string{"--pps", "10", "--burst", "1", "--shape", "--max-delay", "10s", "--write-accepted", filepath.Join(dir, "accepted.pcap")}, 2000},
	} {
		path := filepath.Join(dir, tc.name)
		size := tc.write(path)
		args := append([]string{"replay", "--json"}, tc.args...)
		if tc.args == nil {
			args = append(args, "--pps", "100")
		}
		start := time.Now()
		out, rss := runPeakRSS(t, bin, append(args, path)...)
		var rep jsonReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s (%d KB): peak RSS %s, %d packets (%d accepted, %d delayed, %d shape_overflow) in %v",
			tc.name, size>>10, mib(rss), rep.Packets, rep.Accepted, rep.Delayed, rep.ShapeOverflow, time.Since(start).Round(time.Millisecond))
		if rss > replayRSSBound {
			t.Errorf("%s: peak RSS %s, over 256 MB", tc.name, mib(rss))
		}
		if rep.Packets != tc.packets {
			t.Errorf("%s: %d packets replayed, want %d", tc.name, rep.Packets, tc.packets)
		}
		if strings.HasPrefix(tc.name, "held") && rep.Delayed == 0 {
			t.Errorf("%s: nothing delayed: the test shows nothing", tc.name)
		}
	}
}
