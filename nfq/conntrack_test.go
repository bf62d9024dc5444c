package nfq

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// ctMsg is packetMsg with NFQA_CT (a nested attribute, here a stand-in
// CTA_STATUS) and NFQA_CT_INFO, as the kernel sends a tracked packet when
// NFQA_CFG_F_CONNTRACK is set.
func ctMsg(id uint32, info uint32) []byte {
	b := packetMsg(id, ipv4UDP(10), 0)
	nest := attr(nil, 3, binary.BigEndian.AppendUint32(nil, 0x8)) // CTA_STATUS
	b = attr(b, nfqaCT|1<<15, nest)                               // NLA_F_NESTED
	b = attr(b, nfqaCTInfo, binary.BigEndian.AppendUint32(nil, info))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	return b
}

// TestParseConntrack: NFQA_CT_INFO gives the packet's state; a packet
// without it has none, also in a batch after one that had; a value past
// the kernel's enum or a short attribute is none; parsing allocates
// nothing.
func TestParseConntrack(t *testing.T) {
	short := packetMsg(5, ipv4UDP(10), 0)
	short = attr(short, nfqaCTInfo, []byte{0, 0})
	binary.LittleEndian.PutUint32(short[0:], uint32(len(short)))
	b := newBatch(7, 8)
	for _, m := range [][]byte{ctMsg(1, CtNew), packetMsg(2, ipv4UDP(10), 0), ctMsg(3, CtEstablishedReply), ctMsg(4, 8), short, ctMsg(6, CtUntracked)} {
		b.addDatagram(m)
	}
	if len(b.pkts) != 6 {
		t.Fatalf("%d packets, want 6", len(b.pkts))
	}
	for i, want := range []struct {
		info uint8
		has  bool
	}{{CtNew, true}, {0, false}, {CtEstablishedReply, true}, {0, false}, {0, false}, {CtUntracked, true}} {
		p := b.pkts[i]
		if p.CtInfo != want.info || p.HasCt != want.has || p.Mark != 42 || len(p.Data) != 38 {
			t.Errorf("packet %d: ct %d has %v mark %d data %d, want %d %v 42 38", i, p.CtInfo, p.HasCt, p.Mark, len(p.Data), want.info, want.has)
		}
	}
	wantNoParseAllocs(t, "conntrack", ctMsg(1, CtEstablished))
}

// TestConfigMsgConntrack: the bind asks for the connection state
// (NFQA_CFG_F_CONNTRACK, bit 1) in the same flags and mask as fail-open and
// owners.
func TestConfigMsgConntrack(t *testing.T) {
	for _, tc := range []struct {
		owners, ct  bool
		mask, flags byte
	}{{true, true, 11, 11}, {false, true, 3, 3}, {true, false, 9, 9}} {
		m := configMsg{cmd: nfqnlCfgCmdBind, flags: true, failOpen: true, owners: tc.owners, conntrack: tc.ct}
		wantCfgFlags(t, fmt.Sprintf("owners %v conntrack %v", tc.owners, tc.ct), m, tc.mask, tc.flags)
	}
}

// FuzzConntrack: the conntrack attributes of a packet message, whatever
// their bytes, parse without a panic into a state of the kernel's enum or
// none, and leave the rest of the packet as it was.
func FuzzConntrack(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2}, []byte{8, 0, 3, 0, 0, 0, 0, 8})
	f.Add([]byte{0, 0, 0, 3}, []byte{})
	f.Add([]byte{0, 0}, []byte{4, 0})
	f.Add([]byte{255, 255, 255, 255}, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, info, nest []byte) {
		if len(info) > 1024 || len(nest) > 1024 {
			return
		}
		base := packetMsg(9, ipv4UDP(10), 0)
		b := attr(append([]byte(nil), base...), nfqaCT|1<<15, nest)
		b = attr(b, nfqaCTInfo, info)
		binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
		bt := newBatch(7, 2)
		bt.addDatagram(b)
		if len(bt.pkts) != 1 {
			t.Fatalf("%d packets", len(bt.pkts))
		}
		p := bt.pkts[0]
		v, ok := parseCtInfo(info)
		if p.HasCt != ok || p.CtInfo != v || (ok && (len(info) < 4 || p.CtInfo > CtUntracked)) {
			t.Fatalf("info %x: ct %d has %v", info, p.CtInfo, p.HasCt)
		}
		if p.ID != 9 || p.Mark != 42 || len(p.Data) != 38 {
			t.Fatalf("the conntrack attributes changed the packet: %+v", p)
		}
	})
}
