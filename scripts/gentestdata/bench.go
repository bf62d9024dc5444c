package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// writeBench writes n packets over nflows UDP flows (Ethernet, IPv4, frames
// of 60 to 260 bytes), 1 µs apart, round-robin over the flows in a seeded
// shuffle.
func writeBench(path string, n, nflows int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriter(bw)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	pkts := make([][]byte, nflows)
	for i := range pkts {
		src := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		pkts[i] = eth4(udp4(src, "192.0.2.1", uint16(1024+i%60000), 443, 18+rng.IntN(200)))
	}
	order := rng.Perm(nflows)
	for k := range n {
		p := pkts[order[k%nflows]]
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(k) * time.Microsecond), CaptureLength: len(p), Length: len(p)}
		if err := w.WritePacket(ci, p); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}
