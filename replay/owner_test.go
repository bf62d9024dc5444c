package replay

import (
	"bytes"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestReplayNoOwner: a capture has no socket owners, so a rule keyed by
// uid holds every packet in its one "no owner" flow (limited, not let
// through), and the summary counts them.
func TestReplayNoOwner(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var recs []rec
	for i := range 20 {
		recs = append(recs, rec{t0 + int64(i)*1000, udpFrame(uint16(1000+i), 10)})
	}
	capture := pcapBytes(t, layers.LinkTypeEthernet, recs)
	eng, err := shaper.New(shaper.Config{Rate: 1, Burst: 4, Key: flows.KeyConfig{Mode: flows.ByUID | flows.NoAddr}})
	if err != nil {
		t.Fatal(err)
	}
	r := New(eng, Options{})
	if err := r.Replay("owner.pcap", bytes.NewReader(capture), 0); err != nil {
		t.Fatal(err)
	}
	s := r.Summary()
	if s.NoOwner != 20 || s.Accepted != 4 || s.Dropped != 16 {
		t.Errorf("summary: no owner %d, accepted %d, dropped %d; want 20, 4, 16", s.NoOwner, s.Accepted, s.Dropped)
	}
	fs := r.Flows(0)
	if len(fs) != 1 || fs[0].Flow != "no owner" {
		t.Errorf("flows %+v, want one, \"no owner\"", fs)
	}
}
