package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
)

// TestStatusFastpathLinks: status prints one line per --fastpath
// interface, its state, attach mode and index, and how often it was
// attached again; none without the fast path.
func TestStatusFastpathLinks(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, &control.Status{})
	if strings.Contains(b.String(), "fast path") {
		t.Errorf("status without the fast path talks of it:\n%s", b.String())
	}
	b.Reset()
	printStatus(&b, &control.Status{Fastpath: []control.FastpathLink{
		{Interface: "wg0", Ifindex: 9, Attach: "tcx", State: "attached", Reattached: 1},
		{Interface: "veth1", State: "interface gone"},
	}})
	wantLines(t, "status", b.String(),
		"fast path at wg0: attached (tcx, ifindex 9); attached again 1 times\n",
		"fast path at veth1: interface gone; attached again 0 times\n")
}
