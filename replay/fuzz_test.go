package replay

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"github.com/packetshaper/packetshaper/shaper"
)

// addCaptureSeeds adds the small captures of testdata/ and, when present,
// of ../shared/pcaps to the fuzz seeds (the checked-in corpus under
// testdata/fuzz/FuzzReplay holds more, including broken ones), and
// crafted pcapng files of every block kind (craftedNg: name-resolution
// blocks with NUL names, interfaces with every option, statistics,
// secrets, custom and unknown blocks), plain and gzip'd, and a section of
// nothing but such blocks.
func addCaptureSeeds(f *testing.F) {
	ng := craftedNg()
	f.Add(ng)
	f.Add(gz(ng))
	b := &ngBuild{o: binary.LittleEndian}
	b.shb().idb(1, 0, b.opt(2, make([]byte, 100)), b.opt(1, make([]byte, 100)))
	for range 8 {
		b.block(4, b.opt(1, make([]byte, 4+200)), b.u32(0))
		b.block(0x40000bad, b.u32(1), make([]byte, 64))
		b.idb(101, 0, b.opt(3, make([]byte, 64)), b.opt(0x0bad, make([]byte, 8)))
	}
	b.epb(8, 1, ipv4, 1400, b.opt(1, make([]byte, 64)))
	f.Add(b.buf.Bytes())
	f.Add(gz(b.buf.Bytes()))
	for _, dir := range append([]string{testdata}, sharedSeedDirs...) {
		for _, b := range captureSeeds(dir) {
			f.Add(b)
		}
	}
}

// sharedSeedDirs are the shared captures' directories that seed the fuzz
// targets when present (TestSharedFuzzSeeds says when they are not).
var sharedSeedDirs = []string{"../../shared/pcaps/normal", "../../shared/pcaps/malformed"}

// captureSeeds are the captures in dir small enough to be fuzz seeds (16
// KiB at most); none if dir cannot be read.
func captureSeeds(dir string) [][]byte {
	var seeds [][]byte
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && len(b) <= 16<<10 && !e.IsDir() {
			seeds = append(seeds, b)
		}
	}
	return seeds
}

// TestSharedFuzzSeeds: the shared captures are there to seed FuzzReplay,
// or the test skips and says that the fuzz targets run without them (the
// summary of scripts/test.sh lists the skip with this reason).
func TestSharedFuzzSeeds(t *testing.T) {
	for _, dir := range sharedSeedDirs {
		if _, err := os.ReadDir(dir); err != nil {
			t.Skipf("no shared captures (%v): FuzzReplay runs without their seeds; they live in ../shared/pcaps next to the repository", err)
		}
		if n := len(captureSeeds(dir)); n == 0 {
			t.Errorf("%s: no capture of at most 16 KiB to seed the fuzz targets", dir)
		} else {
			t.Logf("%s: %d seeds", dir, n)
		}
	}
}

// FuzzReplay drives arbitrary bytes through the whole replay path (format
// sniffing, gzip, pcapgo, Decap, the engine, every output). It checks that
// nothing panics, that an error is one line, that the counts and the
// verdict lines agree, and that no input makes it allocate more than a
// bounded amount (a fixed 16 MiB plus 64 bytes per input byte, for the
// flow table: a huge declared length must not be believed).
func FuzzReplay(f *testing.F) {
	addCaptureSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		eng, err := shaper.New(shaper.Config{Rate: 5, Burst: 2, MaxFlows: 64})
		if err != nil {
			t.Fatal(err)
		}
		var verdicts bytes.Buffer
		r := New(eng, Options{Verdicts: &verdicts, Accepted: io.Discard, Dropped: io.Discard})
		var rerr error
		a := allocated(func() {
			rerr = r.Replay("fuzz.pcap", bytes.NewReader(data), int64(len(data)))
			r.Flush()
		})
		if limit := uint64(16<<20 + 64*len(data)); a > limit {
			t.Errorf("allocated %d bytes for a %d-byte input (limit %d)", a, len(data), limit)
		}
		if rerr != nil {
			msg := rerr.Error()
			if !strings.HasPrefix(msg, "fuzz.pcap: ") || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error %q is not one line naming the file", msg)
			}
		}
		s := r.Summary()
		if s.Accepted+s.Dropped != s.Packets || s.Malformed+s.NonIP > s.Packets {
			t.Errorf("inconsistent summary %+v", s)
		}
		if n := bytes.Count(verdicts.Bytes(), []byte("\n")); uint64(n) != s.Packets {
			// Each record's verdict line is written before its pcap
			// output, so even a failed output write leaves them equal.
			t.Errorf("%d verdict lines for %d packets", n, s.Packets)
		}
	})
}

// FuzzDecap: for any link type and bytes, Decap does not panic and returns
// a suffix of its input.
func FuzzDecap(f *testing.F) {
	for _, lt := range []uint16{0, 1, 12, 14, 101, 108, 113, 228, 229, 239, 276} {
		f.Add(lt, cat(ethHdr, be16(0x8100), be16(1), be16(0x0800), ipv4))
		f.Add(lt, []byte{2, 0, 0, 1, 8, 0, 9, 0, 0x45, 0, 0, 0})
	}
	f.Fuzz(func(t *testing.T, lt uint16, b []byte) {
		if !Supported(layers.LinkType(lt)) {
			return
		}
		p, ip := Decap(layers.LinkType(lt), b)
		if !ip {
			return
		}
		if len(p) > len(b) {
			t.Fatalf("payload longer than frame")
		}
		if len(p) > 0 && unsafe.Pointer(&p[len(p)-1]) != unsafe.Pointer(&b[len(b)-1]) {
			// NFLOG's payload TLV may end before the frame does.
			if lt != 239 {
				t.Fatalf("payload is not a suffix of the frame")
			}
		}
	})
}
