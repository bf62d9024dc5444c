package shaper

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
)

// synAck is an IPv4 TCP SYN-ACK from 10.255.0.1:80 to 10.0.0.i, no
// payload: what the kernel answers a SYN with.
func synAck(i int) []byte {
	b := make([]byte, 40)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], 40)
	b[8], b[9] = 64, 6
	copy(b[12:], []byte{10, 255, 0, 1})
	copy(b[16:], []byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	binary.BigEndian.PutUint16(b[20:], 80)
	binary.BigEndian.PutUint16(b[22:], uint16(40000+i))
	b[32] = 5 << 4      // data offset: 20 bytes
	b[33] = 0x02 | 0x10 // SYN, ACK
	return b
}

// TestEngineNoOwner: what each no-owner gives the ownerless packets of a
// uid rule (burst 3, rate 1/s): the kernel's replies (SYN-ACKs) and data
// (UDP), 40 of each, the replies to 40 destinations, the data to one; a
// user's own packets are limited alike under every choice.
func TestEngineNoOwner(t *testing.T) {
	for _, c := range []struct {
		no                   flows.NoOwner
		replies, data, flows int
	}{
		{flows.NoOwnerAcceptReplies, 40, 3, 2}, // uid 1001 and "no owner"
		{flows.NoOwnerLimit, 3, 0, 2},          // the replies spend the one bucket first
		{flows.NoOwnerAccept, 40, 40, 1},
		{flows.NoOwnerKeyByDst, 40, 3, 42}, // 40 reply destinations, the data's one, uid 1001
	} {
		e := mustNew(t, Config{Rate: 1, Burst: 3, Key: flows.KeyConfig{Mode: flows.ByUID | flows.NoAddr, NoOwner: c.no}})
		var d Decision
		var replies, data, own int
		for i := range 40 {
			if e.DecidePacket(synAck(i), nil, t0, &d); d.Verdict == Accept {
				replies++
			}
		}
		for i := range 40 {
			if e.DecidePacket(udp(i, 1000, 10), &Meta{HasOwner: false}, t0, &d); d.Verdict == Accept {
				data++
			}
			if e.DecidePacket(udp(i, 1000, 10), &Meta{UID: 1001, HasOwner: true}, t0, &d); d.Verdict == Accept {
				own++
			}
		}
		got := fmt.Sprint(replies, data, own, e.Stats().Flows)
		if want := fmt.Sprint(c.replies, c.data, 3, c.flows); got != want {
			t.Errorf("no-owner %v: replies, data, uid 1001 accepted, flows: %s, want %s", c.no, got, want)
		}
		if s := e.RuleStats(0); s.Accepted != uint64(replies+data+own) || s.Packets != 120 {
			t.Errorf("no-owner %v: rule stats %+v, want 120 packets, %d accepted", c.no, s, replies+data+own)
		}
	}
}
