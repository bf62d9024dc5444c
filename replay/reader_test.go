package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/shaper"
)

// testdata is the repository's testdata directory.
const testdata = "../testdata"

// rec is a record to write into a test capture.
type rec struct {
	t    int64 // ns since the epoch
	data []byte
}

// pcapBytes writes recs as a nanosecond pcap of link type lt.
func pcapBytes(t testing.TB, lt layers.LinkType, recs []rec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, r.t), CaptureLength: len(r.data), Length: len(r.data)}
		if err := w.WritePacket(ci, r.data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// readAll reads every record of a capture; it returns the count and the
// error that stopped it (nil at a clean end).
func readAll(src io.Reader) (int, error) {
	rd, err := NewReader(src)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, _, _, err := rd.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// TestTestdataCaptures replays every capture in testdata/ and checks its
// counts: what the generator put in each file (see testdata/README.md).
func TestTestdataCaptures(t *testing.T) {
	tests := []struct {
		file                               string
		packets, dropped, malformed, nonIP uint64
		flows                              uint64
		err                                string
	}{
		{file: "multiflow.pcap", packets: 555, dropped: 408, flows: 5},
		{file: "multiflow-ns-be.pcap", packets: 555, dropped: 408, flows: 5},
		{file: "multiflow.pcap.gz", packets: 555, dropped: 408, flows: 5},
		{file: "vlan-mpls.pcap", packets: 15, malformed: 3, nonIP: 4, flows: 2},
		{file: "ipv6-ext-frag.pcap", packets: 8, flows: 4}, // the cut chain is keyed without ports, not malformed, with the IPv6 later fragments (protocol unknown)
		{file: "sll.pcap", packets: 7, nonIP: 1, flows: 4},
		{file: "sll2.pcap", packets: 7, nonIP: 1, flows: 4},
		{file: "raw101.pcap", packets: 6, flows: 4},
		{file: "raw12.pcap", packets: 6, flows: 4},
		{file: "raw14.pcap", packets: 6, flows: 4},
		{file: "ipv4-228.pcap", packets: 3, flows: 2},
		{file: "ipv6-229.pcap", packets: 3, flows: 2},
		{file: "null.pcap", packets: 8, nonIP: 2, flows: 4},
		{file: "loop.pcap", packets: 8, nonIP: 2, flows: 4},
		{file: "nflog.pcap", packets: 7, malformed: 1, nonIP: 1, flows: 4},
		{file: "mixed.pcapng", packets: 16, flows: 4},
		{file: "mixed.pcapng.gz", packets: 16, flows: 4},
		{file: "truncated.pcap", packets: 10, dropped: 1, flows: 3, err: "truncated.pcap: packet 11: truncated"},
		{file: "huge-caplen.pcap", packets: 1, flows: 1, err: "huge-caplen.pcap: packet 2: "},
		{file: "unsupported-linktype.pcap", err: "unsupported-linktype.pcap: unsupported link type 802.11 (105)"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			eng, err := shaper.New(shaper.Config{Rate: 10, Burst: 5})
			if err != nil {
				t.Fatal(err)
			}
			r := New(eng, Options{})
			err = r.ReplayFile(filepath.Join(testdata, tt.file))
			if tt.err == "" && err != nil {
				t.Fatalf("ReplayFile: %v", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("ReplayFile: error %v, want one containing %q", err, tt.err)
			}
			s := r.Summary()
			if s.Packets != tt.packets || s.Dropped != tt.dropped || s.Malformed != tt.malformed || s.NonIP != tt.nonIP || s.Flows != tt.flows {
				t.Errorf("packets %d dropped %d malformed %d non_ip %d flows %d; want %d %d %d %d %d",
					s.Packets, s.Dropped, s.Malformed, s.NonIP, s.Flows, tt.packets, tt.dropped, tt.malformed, tt.nonIP, tt.flows)
			}
			if s.Accepted+s.Dropped != s.Packets {
				t.Errorf("accepted %d + dropped %d != packets %d", s.Accepted, s.Dropped, s.Packets)
			}
		})
	}
}

// TestTimestamps checks that the three timestamp encodings (pcap µs, pcap
// ns big-endian, pcapng with per-interface resolutions) give the engine
// the same clock.
func TestTimestamps(t *testing.T) {
	first := func(name string) []int64 {
		var ts []int64
		for _, r := range readRecords(t, openCapture(t, filepath.Join(testdata, name))) {
			ts = append(ts, r.ts)
		}
		return ts
	}
	a, b := first("multiflow.pcap"), first("multiflow-ns-be.pcap")
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("multiflow.pcap and multiflow-ns-be.pcap timestamps differ")
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ng := first("mixed.pcapng")
	for i, ts := range ng {
		want := t0 + int64(i)*50e6 + 125e3
		tol := int64(0)
		if i%4 == 3 {
			tol = 1e6 // 2^-20 s units, converted by pcapgo with an integer factor
		}
		if d := ts - want; d < -tol || d > tol {
			t.Errorf("mixed.pcapng packet %d (interface %d): %d ns after t0, want %d", i+1, i%4, ts-t0, want-t0)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	good := pcapBytes(t, 1, []rec{{1e9, cat(ethHdr, be16(0x0800), ipv4)}, {2e9, cat(ethHdr, be16(0x0800), ipv4)}})
	var gzGood bytes.Buffer
	zw := gzip.NewWriter(&gzGood)
	zw.Write(good)
	zw.Close()
	oversize := pcapBytes(t, 1, []rec{{1e9, ipv4}, {2e9, make([]byte, MaxRecord+1)}})
	binary.LittleEndian.PutUint32(oversize[16:20], 0x7fffffff) // snap length: pcapgo would refuse the record itself
	tests := []struct {
		name string
		data []byte
		n    int
		err  string
	}{
		{"empty", nil, 0, "empty file"},
		{"short", []byte{0xd4, 0xc3}, 0, "too short"},
		{"garbage", []byte("hello, world, this is not a capture"), 0, "not a pcap or pcapng capture (first bytes 68 65 6c 6c)"},
		{"pcap header cut", good[:20], 0, "pcap header: truncated"},
		{"record header cut", good[:24+16+len(ipv4)+14+5], 1, "truncated"},
		{"record data cut", good[:len(good)-3], 1, "truncated"},
		{"gzip cut", gzGood.Bytes()[:gzGood.Len()-10], -1, ""},
		{"oversize record", oversize, 1, "capture length 262145 exceeds the 262144-byte maximum"},
		{"bad gzip", []byte{0x1f, 0x8b, 1, 2, 3}, 0, "gzip"},
	}
	for _, tt := range tests {
		n, err := readAll(bytes.NewReader(tt.data))
		if tt.n >= 0 && n != tt.n {
			t.Errorf("%s: read %d records, want %d", tt.name, n, tt.n)
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", tt.name, err)
		}
	}
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeLengthsBounded: declared lengths far beyond the data must not
// make the reader allocate them: a 4 GiB snap length with a 2 GiB record,
// a pcapng block claiming 4 GiB, and a small gzip file whose one record
// inflates to 256 MiB.
func TestHugeLengthsBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("streams hundreds of MB through code with no goroutine: nothing for the race detector, five times as long (scripts/test.sh runs this test without -race first)")
	}
	huge, err := os.ReadFile(filepath.Join(testdata, "huge-caplen.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	// pcapng: SHB, IDB, then an EPB declaring a 0xfffffff0-byte capture.
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	w.Flush()
	epb := make([]byte, 28)
	binary.LittleEndian.PutUint32(epb[0:], 6)
	binary.LittleEndian.PutUint32(epb[4:], 0xfffffffc)
	binary.LittleEndian.PutUint32(epb[20:], 0xffffffd0) // fits the block
	binary.LittleEndian.PutUint32(epb[24:], 0xffffffd0)
	ng.Write(epb)
	ng.Write(make([]byte, 100))
	// The same with a captured length that runs past the block.
	ngPast := bytes.Clone(ng.Bytes())
	binary.LittleEndian.PutUint32(ngPast[len(ngPast)-100-8:], 0xfffffff0)

	// gzip bomb: a pcap whose second record claims 0x7fffffff bytes, and
	// 256 MiB of zeros follow.
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	hdr := pcapBytes(t, 1, []rec{{1e9, cat(ethHdr, be16(0x0800), ipv4)}})
	binary.LittleEndian.PutUint32(hdr[16:20], 0xffffffff)
	zw.Write(hdr)
	rh := make([]byte, 16)
	binary.LittleEndian.PutUint32(rh[8:], 0x7fffffff)
	binary.LittleEndian.PutUint32(rh[12:], 0x7fffffff)
	zw.Write(rh)
	zeros := make([]byte, 1<<20)
	for range 256 {
		zw.Write(zeros)
	}
	zw.Close()
	zeros = nil
	t.Logf("gzip bomb: %d bytes compressed", bomb.Len())

	for _, tt := range []struct {
		name string
		data []byte
		n    int
		err  string
	}{
		{"pcap 2 GiB record", huge, 1, "truncated"},
		{"pcapng 4 GiB block", ng.Bytes(), 0, "truncated"},
		{"pcapng 4 GiB record in a smaller block", ngPast, 0, "captured length 4294967280 runs past its block"},
		{"gzip bomb", bomb.Bytes(), 1, "record larger than 262144 bytes"},
	} {
		var n int
		var err error
		start := time.Now()
		a := allocated(func() { n, err = readAll(bytes.NewReader(tt.data)) })
		if n != tt.n || err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: read %d records, error %v; want %d and an error containing %q", tt.name, n, err, tt.n, tt.err)
		}
		if a > 8<<20 {
			t.Errorf("%s: allocated %d bytes, want at most 8 MiB", tt.name, a)
		}
		t.Logf("%s: %v, allocated %d KiB in %v", tt.name, err, a>>10, time.Since(start))
	}
}

// sharedPcaps lists the captures in ../shared/pcaps/<dir>, or skips.
func sharedPcaps(t *testing.T, dir string) []string {
	t.Helper()
	d := filepath.Join("..", "..", "shared", "pcaps", dir)
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Skipf("no shared captures (%v): they live in ../shared/pcaps next to the repository", err)
	}
	var files []string
	for _, e := range ents {
		if !e.IsDir() {
			files = append(files, filepath.Join(d, e.Name()))
		}
	}
	return files
}

// replayWithin replays name through a fresh engine and fails the test if
// that takes more than 20 s (a hang).
func replayWithin(t *testing.T, name string) (Summary, error) {
	t.Helper()
	eng, err := shaper.New(shaper.Config{Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	r := New(eng, Options{Verdicts: io.Discard})
	done := make(chan error, 1)
	go func() { done <- r.ReplayFile(name) }()
	select {
	case err := <-done:
		return r.Summary(), err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: replay still running after 20 s", name)
	}
	return Summary{}, nil
}

// TestSharedNormal: every capture in shared/pcaps/normal replays without
// error.
func TestSharedNormal(t *testing.T) {
	for _, f := range sharedPcaps(t, "normal") {
		s, err := replayWithin(t, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if s.Accepted+s.Dropped != s.Packets {
			t.Errorf("%s: accepted %d + dropped %d != packets %d", f, s.Accepted, s.Dropped, s.Packets)
		}
	}
}

// TestSharedMalformed: every capture in shared/pcaps/malformed replays, or
// stops with a one-line error that names the file; never a panic or hang.
func TestSharedMalformed(t *testing.T) {
	for _, f := range sharedPcaps(t, "malformed") {
		_, err := replayWithin(t, f)
		if err == nil {
			continue
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r") || !strings.HasPrefix(msg, f+": ") {
			t.Errorf("%s: error %q is not one line starting with the file name", f, msg)
		}
		t.Logf("%s", msg)
	}
}

func TestNanosClamps(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 5), 5},
		{time.Unix(-1, 0), 0},
		{time.Unix(-1<<40, 0), 0},
		{time.Unix(1<<40, 0), math.MaxInt64},
		{time.Time{}, 0},
	} {
		ci := gopacket.CaptureInfo{Timestamp: tc.t}
		if got := Nanos(&ci); got != tc.want {
			t.Errorf("Nanos(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}
