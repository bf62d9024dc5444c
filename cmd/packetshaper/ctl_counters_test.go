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
	}
	var out bytes.Buffer
	printStatus(&out, &st)
	var table []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "RULE ") || strings.HasPrefix(l, "trial ") || strings.HasPrefix(l, "tag ") {
			table = append(table, strings.Join(strings.Fields(l), " "))
		}
	}
	want := []string{
		"RULE LIMIT PACKETS ACCEPTED DROPPED SHADOW MARKED FLOWS EVICTIONS PATH",
		"trial token-bucket 10 packets/s burst 2, key src, shadow 50 50 0 37 0 2 0 queue",
		"tag token-bucket 10 packets/s burst 2, key src, marks over the limit 40 40 0 0 29 1 4 kernel",
	}
	if strings.Join(table, "\n") != strings.Join(want, "\n") {
		t.Errorf("rule table:\n%s\nwant:\n%s\nstatus:\n%s", strings.Join(table, "\n"), strings.Join(want, "\n"), out.String())
	}
}
