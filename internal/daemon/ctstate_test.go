package daemon

import (
	"testing"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestCtState: the kernel's ip_conntrack_info as the engine's states; no
// state without the queue asking; none sent is invalid or untracked.
func TestCtState(t *testing.T) {
	for _, tt := range []struct {
		p         nfq.Packet
		conntrack bool
		want      shaper.CtState
	}{
		{nfq.Packet{CtInfo: nfq.CtNew, HasCt: true}, false, 0},
		{nfq.Packet{}, true, shaper.CtInvalid | shaper.CtUntracked},
		{nfq.Packet{CtInfo: nfq.CtNew, HasCt: true}, true, shaper.CtNew},
		{nfq.Packet{CtInfo: nfq.CtEstablished, HasCt: true}, true, shaper.CtEstablished},
		{nfq.Packet{CtInfo: nfq.CtEstablishedReply, HasCt: true}, true, shaper.CtEstablished},
		{nfq.Packet{CtInfo: nfq.CtRelated, HasCt: true}, true, shaper.CtRelated},
		{nfq.Packet{CtInfo: nfq.CtRelatedReply, HasCt: true}, true, shaper.CtRelated},
		{nfq.Packet{CtInfo: nfq.CtUntracked, HasCt: true}, true, shaper.CtUntracked},
		{nfq.Packet{CtInfo: 5, HasCt: true}, true, shaper.CtInvalid},
	} {
		if got := ctState(&tt.p, tt.conntrack); got != tt.want {
			t.Errorf("ctState(%+v, %v) = %d, want %d", tt.p, tt.conntrack, got, tt.want)
		}
	}
}
