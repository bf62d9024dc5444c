// Command gentestdata writes the synthetic captures in testdata/ that the
// replay tests use. Everything is derived from a fixed seed and fixed
// times, so running it again gives the same bytes:
//
//	go run ./scripts/gentestdata            # writes ./testdata
//	go run ./scripts/gentestdata -out DIR
//	go run ./scripts/gentestdata -big N -flows F -out DIR   # only bench.pcap: N packets over F flows
//
// Packets are built with gopacket.SerializeLayers and written with pcapgo's
// Writer and NgWriter. Link-layer headers that gopacket cannot serialize
// (Linux SLL/SLL2, BSD NULL/LOOP, NFLOG) are written as bytes in front of a
// serialized IP packet. testdata/README.md says what each file holds.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// t0 is the capture start of every file: 2025-01-01 00:00:00 UTC.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
)

func main() {
	out := flag.String("out", "testdata", "output directory")
	big := flag.Int("big", 0, "write only bench.pcap with this many packets")
	nflows := flag.Int("flows", 10000, "flows in bench.pcap")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	if *big > 0 {
		if err := writeBench(filepath.Join(*out, "bench.pcap"), *big, *nflows); err != nil {
			fail(err)
		}
		return
	}
	for _, f := range files {
		b, err := f.gen()
		if err != nil {
			fail(fmt.Errorf("%s: %w", f.name, err))
		}
		if err := os.WriteFile(filepath.Join(*out, f.name), b, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentestdata:", err)
	os.Exit(1)
}

var files = []struct {
	name string
	gen  func() ([]byte, error)
}{
	{"multiflow.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, multiflow()) }},
	{"multiflow-ns-be.pcap", func() ([]byte, error) {
		b, err := pcapFile(layers.LinkTypeEthernet, true, multiflow())
		if err != nil {
			return nil, err
		}
		return bigEndian(b), nil
	}},
	{"multiflow.pcap.gz", func() ([]byte, error) {
		b, err := pcapFile(layers.LinkTypeEthernet, false, multiflow())
		if err != nil {
			return nil, err
		}
		return gz(b)
	}},
	{"vlan-mpls.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, vlanMPLS()) }},
	{"ipv6-ext-frag.pcap", func() ([]byte, error) { return pcapFile(layers.LinkTypeEthernet, false, extFrag()) }},
	{"sll.pcap", func() ([]byte, error) { return pcapFile(113, false, cooked(sllHeader)) }},
	{"sll2.pcap", func() ([]byte, error) { return pcapFile(276, false, cooked(sll2Header)) }},
	{"raw101.pcap", func() ([]byte, error) { return pcapFile(101, false, rawIP(true, true)) }},
	{"raw12.pcap", func() ([]byte, error) { return pcapFile(12, false, rawIP(true, true)) }},
	{"raw14.pcap", func() ([]byte, error) { return pcapFile(14, false, rawIP(true, true)) }},
	{"ipv4-228.pcap", func() ([]byte, error) { return pcapFile(228, false, rawIP(true, false)) }},
	{"ipv6-229.pcap", func() ([]byte, error) { return pcapFile(229, false, rawIP(false, true)) }},
	{"null.pcap", func() ([]byte, error) { return pcapFile(0, false, nullFrames(false)) }},
	{"loop.pcap", func() ([]byte, error) { return pcapFile(108, false, nullFrames(true)) }},
	{"nflog.pcap", func() ([]byte, error) { return pcapFile(239, false, nflog()) }},
	{"mixed.pcapng", mixedNg},
	{"mixed.pcapng.gz", func() ([]byte, error) {
		b, err := mixedNg()
		if err != nil {
			return nil, err
		}
		return gz(b)
	}},
	{"policy-mix.pcapng", policyMix},
	{"truncated.pcap", truncated},
	{"huge-caplen.pcap", hugeCaplen},
	{"unsupported-linktype.pcap", func() ([]byte, error) {
		return pcapFile(105, false, []frame{{t: t0, data: make([]byte, 24)}}) // IEEE 802.11
	}},
}

// frame is one record: capture time, bytes, and for pcapng the interface.
type frame struct {
	t     time.Time
	data  []byte
	iface int
}

// pcapFile writes frames as a little-endian pcap (nanosecond magic if ns).
func pcapFile(lt layers.LinkType, ns bool, frames []frame) ([]byte, error) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if ns {
		w = pcapgo.NewWriterNanos(&buf)
	}
	if err := w.WriteFileHeader(65535, lt); err != nil {
		return nil, err
	}
	for _, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: f.t, CaptureLength: len(f.data), Length: len(f.data)}
		if err := w.WritePacket(ci, f.data); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// bigEndian rewrites a little-endian pcap as big-endian (pcapgo writes
// only little-endian): every header field is byte-swapped.
func bigEndian(b []byte) []byte {
	out := bytes.Clone(b)
	swap32 := func(p []byte) { binary.BigEndian.PutUint32(p, binary.LittleEndian.Uint32(p)) }
	swap16 := func(p []byte) { binary.BigEndian.PutUint16(p, binary.LittleEndian.Uint16(p)) }
	swap32(out[0:4])
	swap16(out[4:6])
	swap16(out[6:8])
	for _, o := range []int{8, 12, 16, 20} {
		swap32(out[o : o+4])
	}
	for i := 24; i+16 <= len(out); {
		n := int(binary.LittleEndian.Uint32(out[i+8 : i+12]))
		for o := 0; o < 16; o += 4 {
			swap32(out[i+o : i+o+4])
		}
		i += 16 + n
	}
	return out
}

// gz compresses b with a header that carries no name or time.
func gz(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
