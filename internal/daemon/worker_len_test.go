package daemon

import (
	"encoding/binary"
	"testing"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestWorkerChargesKernelLength: the worker hands the engine the kernel's
// packet length (nfq.Packet.Len), so that a byte-rate rule charges a packet
// its real size, not the copied bytes: IPv6 packets of 1400 bytes with
// payload length 0 behind a hop-by-hop header, 64 bytes copied, against a
// burst of 15000 bytes at one instant: 10 accepted, not 234.
func TestWorkerChargesKernelLength(t *testing.T) {
	const size, burst = 1400, 15000
	pkt := make([]byte, size)
	pkt[0], pkt[6], pkt[7] = 0x60, 0, 64 // payload length 0, next header hop-by-hop
	copy(pkt[8:24], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	copy(pkt[24:40], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
	pkt[40], pkt[42], pkt[43] = 17, 1, 4 // hop-by-hop: next UDP, PadN
	binary.BigEndian.PutUint16(pkt[48:], 5000)
	binary.BigEndian.PutUint16(pkt[50:], 9000)
	binary.BigEndian.PutUint16(pkt[52:], size-48)

	eng, err := shaper.New(shaper.Config{Rate: 1000, Bytes: true, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(0, eng)
	batch := make([]nfq.Packet, 100)
	for i := range batch {
		batch[i] = nfq.Packet{ID: uint32(i + 1), Data: pkt[:64], Len: size}
	}
	v := make([]nfq.Verdict, len(batch))
	w.decide(batch, v, int64(1e18))
	acc := 0
	for _, x := range v {
		if x.Action != nfq.Drop {
			acc++
		}
	}
	if acc != burst/size {
		t.Errorf("%d of %d packets of %d bytes (64 copied) accepted at one instant, want %d (burst %d bytes)", acc, len(batch), size, burst/size, burst)
	}
}
