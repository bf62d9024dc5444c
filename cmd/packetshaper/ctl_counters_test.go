package main

import (
	"bytes"
	"path/filepath"
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
	checkStatusLines(t, &st, []string{
		"RULE LIMIT PACKETS ACCEPTED DROPPED SHADOW MARKED FLOWS EVICTIONS PATH",
		"trial token-bucket 10 packets/s burst 2, key src, shadow 50 50 0 37 0 2 0 queue",
		"tag token-bucket 10 packets/s burst 2, key src, marks over the limit 40 40 0 0 29 1 4 kernel",
		"tcp token-bucket 20 Mbit/s burst 250000 bytes, shapes (max-delay 50ms), key 5tuple 30 30 0 0 0 1 0 queue",
		"udp token-bucket 1.5 Mbit/s burst 65535 bytes, polices, key 5tuple 20 10 10 0 0 1 0 queue",
	})
}

// checkStatusLines prints st as status does and requires its lines that
// start with the first word of one of want's to be want, spaces squeezed.
func checkStatusLines(t *testing.T, st *control.Status, want []string) {
	t.Helper()
	first := map[string]bool{}
	for _, w := range want {
		first[strings.Fields(w)[0]] = true
	}
	var out bytes.Buffer
	printStatus(&out, st)
	var got []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && first[f[0]] {
			got = append(got, strings.Join(f, " "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("status:\n%s\nwant:\n%s\nall of it:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out.String())
	}
}

// TestStatusTotalsTable: status names a rule's total in its limit and
// lists each total with its limit and counters.
func TestStatusTotalsTable(t *testing.T) {
	st := ctlHandler{}.Status()
	st.Rules = []control.Rule{{Name: "guest", Action: "limit", Algorithm: "token-bucket", Rate: 100, Unit: "packets", Burst: 5, Key: "src", Total: "guests",
		Packets: 6400, Accepted: 1617, Dropped: 4783, Flows: 8}}
	st.Totals = []control.Total{
		{Name: "guests", Algorithm: "token-bucket", Rate: 400, Unit: "packets", Burst: 20, Packets: 6400, Accepted: 1617, Dropped: 4000},
		{Name: "rule:api", Algorithm: "fixed-window", Rate: 20e6 / 8, Unit: "bytes", WindowSecs: 0.1, Packets: 3, Accepted: 3},
	}
	checkStatusLines(t, &st, []string{
		"guest token-bucket 100 packets/s burst 5, polices, key src, total guests 6400 1617 4783 0 0 8 0 queue",
		"TOTAL LIMIT PACKETS ACCEPTED DROPPED",
		"guests token-bucket 400 packets/s burst 20 6400 1617 4000",
		"rule:api fixed-window 20 Mbit/s window 0.1s 3 3 0",
	})
}

// TestReplayTotalsSummary: replay's summary lists a rule's own total with
// its counters: one source at 10/s with a total of 20/s, so the total
// refuses only what passes the source's limit and overflows it.
func TestReplayTotalsSummary(t *testing.T) {
	pol := writeFile(t, "p.toml", "[[rule]]\nname = \"r\"\nkey = \"src\"\npps = 10\n[rule.total]\npps = 20\n")
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--policy", pol, filepath.Join(testdata, "multiflow-ns-be.pcap")}, &stdout, &stderr); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "  TOTAL                   PACKETS   ACCEPTED    DROPPED\n  rule:r                      555         35          4\n") {
		t.Errorf("replay's summary has no totals table with rule:r 555 35 4:\n%s", stdout.String())
	}
}
