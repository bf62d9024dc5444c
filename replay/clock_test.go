package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/shaper"
)

// clockFile is a capture of n UDP packets, one every 100 ms from t0.
func clockFile(t *testing.T, t0 int64, n int) []byte {
	t.Helper()
	var rs []rec
	for k := range n {
		rs = append(rs, rec{t0 + int64(k)*100*ms, udpFrame(1000, 100)})
	}
	return pcapBytes(t, layers.LinkTypeEthernet, rs)
}

// replayClock replays files with o (and Warn) and returns the summary and
// the warnings.
func replayClock(t *testing.T, o Options, files ...[]byte) (Summary, []string) {
	t.Helper()
	eng, err := shaper.New(shaper.Config{Rate: 5, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	o.Warn = func(w string) { warns = append(warns, w) }
	r := New(eng, o)
	for i, f := range files {
		if err := r.Replay(string(rune('a'+i))+".pcap", bytes.NewReader(f), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	return r.Summary(), warns
}

// TestClockFiles: several files each keep their own clock, one after the
// other, unless --concatenate makes them one; a jump back or forward by
// more than the bounds is warned, within a file and across concatenated
// files, once per jump.
func TestClockFiles(t *testing.T) {
	const t0 = int64(1.7e18)
	a := clockFile(t, t0, 10)                               // 0.9 s
	unrelated := clockFile(t, t0+2000*int64(time.Hour), 10) // 2000 h later
	// Each file its own clock: a file given twice is 2 × 0.9 s (and the
	// step between them), two unrelated captures too; no warning.
	for _, second := range [][]byte{a, unrelated} {
		s, warns := replayClock(t, Options{OwnClocks: true}, a, second)
		if want := 1800*time.Millisecond + ClockStep; s.Duration() != want || len(warns) != 0 {
			t.Errorf("own clocks: duration %v, warnings %q; want %v, none", s.Duration(), warns, want)
		}
		// At 5/s, burst 1: every other packet of each file (0, 0.2,
		// ... 0.8 s), the second file's clock going on from the first's.
		if s.Accepted != 10 {
			t.Errorf("own clocks: %d accepted, want 10", s.Accepted)
		}
	}
	// One clock: the same file twice goes back 0.9 s: within the default
	// 1 s, no warning; with --max-backward 500ms, one.
	if s, warns := replayClock(t, Options{}, a, a); len(warns) != 0 || s.Accepted >= 10 {
		t.Errorf("a file twice, back 0.9 s: warnings %q, %d accepted; want none, fewer than 10 (time going back grants nothing)", warns, s.Accepted)
	}
	_, warns := replayClock(t, Options{MaxBackward: 500 * time.Millisecond}, a, a)
	if want := "b.pcap: packet 1: capture time goes back 900ms (more than --max-backward 500ms)"; len(warns) != 1 || !strings.HasPrefix(warns[0], want) {
		t.Errorf("a file twice, --max-backward 500ms: warnings %q, want one %q", warns, want)
	}
	s, warns := replayClock(t, Options{}, a, unrelated)
	if want := "b.pcap: packet 1: capture time jumps forward 1999h59m59.1s (more than --max-gap 1h0m0s)"; len(warns) != 1 || !strings.HasPrefix(warns[0], want) {
		t.Errorf("unrelated captures concatenated: warnings %q, want one %q", warns, want)
	}
	if s.Duration() < 1999*time.Hour {
		t.Errorf("concatenated: duration %v, want the timestamps' 2000 h", s.Duration())
	}
	if _, warns := replayClock(t, Options{MaxGap: -1}, a, unrelated); len(warns) != 0 {
		t.Errorf("--max-gap 0: warnings %q, want none", warns)
	}
	// Within one file: 7 jumps back (the 5 s forward again are within
	// --max-gap), 5 warned, all counted.
	var rs []rec
	for k := range 15 {
		at := t0 + int64(k)*100*ms
		if k%2 == 1 {
			at -= 5 * int64(time.Second)
		}
		rs = append(rs, rec{at, udpFrame(1000, 100)})
	}
	eng, _ := shaper.New(shaper.Config{Rate: 5})
	var got []string
	r := New(eng, Options{Warn: func(w string) { got = append(got, w) }})
	if err := r.Replay("j.pcap", bytes.NewReader(pcapBytes(t, layers.LinkTypeEthernet, rs)), 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || r.TimeJumps() != 7 || !strings.HasSuffix(got[4], "(further jumps are counted, not shown)") {
		t.Errorf("%d warnings, %d jumps, want 5 and 7:\n%s", len(got), r.TimeJumps(), strings.Join(got, "\n"))
	}
}

// TestClockHeldTimestamps: a packet a shaping rule delays is written to
// --write-accepted at its departure in its own file's timestamps, not in
// the shifted clock.
func TestClockHeldTimestamps(t *testing.T) {
	const t0 = int64(1.7e18)
	var rs []rec
	for k := range 3 {
		rs = append(rs, rec{t0 + int64(k)*ms, udpFrame(1000, 100)})
	}
	file := pcapBytes(t, layers.LinkTypeEthernet, rs)
	eng, err := shaper.New(shaper.Config{Rate: 10, Burst: 1, Shape: true, MaxDelay: int64(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var acc bytes.Buffer
	r := New(eng, Options{Accepted: &acc, OwnClocks: true})
	for _, name := range []string{"a.pcap", "b.pcap"} {
		if err := r.Replay(name, bytes.NewReader(file), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := pcapgo.NewReader(&acc)
	if err != nil {
		t.Fatal(err)
	}
	var ts []time.Duration
	for {
		_, ci, err := rd.ReadPacketData()
		if err != nil {
			break
		}
		ts = append(ts, time.Duration(ci.Timestamp.UnixNano()-t0))
	}
	// Each file: the first at once, then 100 ms apart; the second file's
	// first waits for the first file's last to have left (its own clock
	// starts 1 µs after the first file's last packet, 2 ms).
	if len(ts) != 6 {
		t.Fatalf("%d packets written, want 6: %v", len(ts), ts)
	}
	for i, d := range ts {
		if d < 0 || d > 2*time.Second {
			t.Errorf("packet %d written at t0%+v: outside its file's own timestamps (shifted clock?)", i, d)
		}
	}
}
