package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
)

// TestStatusShadowMarked: status's rule table has SHADOW (what a shadow
// rule would have dropped) and MARKED columns, with each rule's counts.
func TestStatusShadowMarked(t *testing.T) {
	st := ctlHandler{}.Status()
	st.Rules = []control.Rule{
		{Name: "trial", Action: "limit", Algorithm: "token-bucket", Rate: 10, Unit: "packets", Burst: 2, Key: "src", Shadow: true,
			Packets: 50, Accepted: 50, ShadowDropped: 37, Flows: 2},
		{Name: "tag", Action: "limit", Algorithm: "token-bucket", Rate: 10, Unit: "packets", Burst: 2, Key: "src", MarkExceeded: true,
			Packets: 40, Accepted: 40, Marked: 29, Flows: 1, Evictions: 4, Path: "kernel"},
		{Name: "tcp", Action: "limit", Algorithm: "token-bucket", Rate: 20e6 / 8, Unit: "bytes", Burst: 250000, Key: "5tuple", Shape: true, MaxDelaySecs: 0.05,
			Packets: 30, Accepted: 30, Flows: 1},
		{Name: "udp", Action: "limit", Algorithm: "token-bucket", Rate: 1.5e6 / 8, Unit: "bytes", Burst: 65535, Key: "5tuple",
			Packets: 20, Accepted: 10, Dropped: 10, Flows: 1},
	}
	var out bytes.Buffer
	printStatus(&out, &st)
	var table []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "RULE ") || strings.HasPrefix(l, "trial ") || strings.HasPrefix(l, "tag ") || strings.HasPrefix(l, "tcp ") || strings.HasPrefix(l, "udp ") {
			table = append(table, strings.Join(strings.Fields(l), " "))
		}
	}
	want := []string{
		"RULE LIMIT PACKETS ACCEPTED DROPPED SHADOW MARKED FLOWS EVICTIONS PATH",
		"trial token-bucket 10 packets/s burst 2, key src, shadow 50 50 0 37 0 2 0 queue",
		"tag token-bucket 10 packets/s burst 2, key src, marks over the limit 40 40 0 0 29 1 4 kernel",
		"tcp token-bucket 20 Mbit/s burst 250000 bytes, shapes (max-delay 50ms), key 5tuple 30 30 0 0 0 1 0 queue",
		"udp token-bucket 1.5 Mbit/s burst 65535 bytes, polices, key 5tuple 20 10 10 0 0 1 0 queue",
	}
	if strings.Join(table, "\n") != strings.Join(want, "\n") {
		t.Errorf("rule table:\n%s\nwant:\n%s\nstatus:\n%s", strings.Join(table, "\n"), strings.Join(want, "\n"), out.String())
	}
}
