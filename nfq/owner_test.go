package nfq

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// ownerMsg is packetMsg with NFQA_UID and NFQA_GID, as the kernel sends a
// packet of a local socket when NFQA_CFG_F_UID_GID is set.
func ownerMsg(id, uid, gid uint32) []byte {
	b := packetMsg(id, ipv4UDP(10), 0)
	b = attr(b, nfqaUID, binary.BigEndian.AppendUint32(nil, uid))
	b = attr(b, nfqaGID, binary.BigEndian.AppendUint32(nil, gid))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	return b
}

// TestParseOwner: NFQA_UID and NFQA_GID fill the packet's owner; a packet
// without them (forwarded, incoming) has none, also in a batch after one
// that had.
func TestParseOwner(t *testing.T) {
	b := newBatch(7, 4)
	msgs := [][]byte{ownerMsg(1, 1001, 100), packetMsg(2, ipv4UDP(10), 0), ownerMsg(3, 0, 0)}
	for _, m := range msgs {
		b.addDatagram(m)
	}
	if len(b.pkts) != 3 {
		t.Fatalf("%d packets, want 3", len(b.pkts))
	}
	for i, want := range []struct {
		uid, gid uint32
		has      bool
	}{{1001, 100, true}, {0, 0, false}, {0, 0, true}} {
		p := b.pkts[i]
		if p.UID != want.uid || p.GID != want.gid || p.HasOwner != want.has || p.Mark != 42 {
			t.Errorf("packet %d: uid %d gid %d has %v mark %d, want %d %d %v 42", i, p.UID, p.GID, p.HasOwner, p.Mark, want.uid, want.gid, want.has)
		}
	}
	wantNoParseAllocs(t, "owners", ownerMsg(1, 1001, 100))
}

// TestConfigMsgOwners: the bind asks for owners (NFQA_CFG_F_UID_GID) in
// the same flags and mask as fail-open.
func TestConfigMsgOwners(t *testing.T) {
	for _, tc := range []struct {
		failOpen, owners bool
		mask, flags      byte
	}{{true, true, 9, 9}, {false, true, 9, 8}, {true, false, 1, 1}} {
		m := configMsg{cmd: nfqnlCfgCmdBind, flags: true, failOpen: tc.failOpen, owners: tc.owners}
		wantCfgFlags(t, fmt.Sprintf("fail-open %v owners %v", tc.failOpen, tc.owners), m, tc.mask, tc.flags)
	}
}
