package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// TestSendRecvLoopback sends 3 flows to two loopback ports (IPv4 and IPv6)
// and checks every count: unprivileged, over lo only.
func TestSendRecvLoopback(t *testing.T) {
	ctx := context.Background()
	// --idle 2s: a sender stalled for 400 ms on a loaded machine (it
	// catches up after) once stopped the receiver before the end.
	rc := recvBackground(t, ctx, "127.0.0.1:29310,[::1]:29311", "--duration", "10s", "--idle", "2s")
	sr, err := runSend(ctx, []string{"--dst", "127.0.0.1:29310,[::1]:29311", "--flows", "3", "--sport", "29320",
		"--pps", "200", "--duration", "1s", "--window", "250ms"})
	if err != nil {
		t.Fatal(err)
	}
	s := sr.(*SendResult)
	if s.Sent != 3*2*200 || s.Errors != 0 {
		t.Errorf("sent %d (errors %d), want 1200 (0)", s.Sent, s.Errors)
	}
	for port, f := range s.Flows {
		var w uint64
		for _, n := range f.Windows {
			w += n
		}
		if f.Sent != 400 || w != 200 {
			t.Errorf("flow %s: sent %d, windows sum %d; want 400, 200", port, f.Sent, w)
		}
		// The windows are those of the packets' times: each between
		// the first's and the last's (a count over the measured
		// time); that 1 s of sending spans 4 or 5 windows of 250 ms is
		// a figure of time (a stalled sender spans more).
		win := int64(250 * time.Millisecond)
		first, last := f.FirstNs/win, f.LastNs/win
		for k := range f.Windows {
			if i, err := strconv.ParseInt(k, 10, 64); err != nil || i < first || i > last {
				t.Errorf("flow %s: window %s outside the packets' windows %d..%d", port, k, first, last)
			}
		}
		timing.Check(t, len(f.Windows) >= 4 && len(f.Windows) <= 5, "flow %s: %d windows of 250ms in 1s, want 4 or 5", port, len(f.Windows))
	}
	o := <-rc
	if o.err != nil {
		t.Fatal(o.err)
	}
	r := o.r.(*RecvResult)
	if r.Total != 1200 || r.Reason != "idle" {
		t.Errorf("received %d (stopped by %s), want 1200 (idle)", r.Total, r.Reason)
	}
	for _, lp := range []string{"29310", "29311"} {
		for _, sp := range []string{"29320", "29321", "29322"} {
			if n := r.Received[lp][sp]; n != 200 {
				t.Errorf("received[%s][%s] = %d, want 200", lp, sp, n)
			}
		}
	}
}

// TestSendAlign: with --align the first packet leaves on a multiple of the
// alignment since the Unix epoch (give or take scheduling).
func TestSendAlign(t *testing.T) {
	const align = 250 * time.Millisecond
	sr, err := runSend(context.Background(), []string{"--dst", "127.0.0.1:29340", "--pps", "40", "--duration", "100ms", "--align", align.String()})
	if err != nil {
		t.Fatal(err)
	}
	f := sr.(*SendResult).Flows["10000"]
	if f == nil || f.Sent == 0 {
		t.Fatalf("nothing sent: %+v", sr)
	}
	if off := time.Duration(f.FirstNs % int64(align)); off > 50*time.Millisecond {
		t.Errorf("first packet %v after a multiple of %v, want about 0", off, align)
	}
}

// TestSendUnpaced: --pps 0 sends --count datagrams per flow and
// destination in sendmmsg batches (IPv4 and IPv6 destinations of one
// dual-stack socket), every one arrives, and the rate is reported.
func TestSendUnpaced(t *testing.T) {
	ctx := context.Background()
	rc := recvBackground(t, ctx, "127.0.0.1:29360,[::1]:29361", "--duration", "10s", "--idle", "400ms")
	const count = 5000
	sr, err := runSend(ctx, []string{"--dst", "127.0.0.1:29360,[::1]:29361", "--flows", "2", "--sport", "29362",
		"--pps", "0", "--count", strconv.Itoa(count), "--batch", "100", "--duration", "5s", "--times", "--window", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	s := sr.(*SendResult)
	if s.Sent != 2*2*count || s.Errors != 0 || s.AchievedPPS <= 0 {
		t.Errorf("sent %d (errors %d) at %.0f/s, want %d (0)", s.Sent, s.Errors, s.AchievedPPS, 2*2*count)
	}
	for port, f := range s.Flows {
		var w uint64
		for _, n := range f.Windows {
			w += n
		}
		if f.Sent != 2*count || len(f.TimesUs) != count || w != count {
			t.Errorf("flow %s: sent %d, %d times, windows sum %d; want %d, %d, %d", port, f.Sent, len(f.TimesUs), w, 2*count, count, count)
		}
	}
	t.Logf("unpaced over loopback: %.0f datagrams/s", s.AchievedPPS)
	o := <-rc
	if o.err != nil {
		t.Fatal(o.err)
	}
	r := o.r.(*RecvResult)
	for _, lp := range []string{"29360", "29361"} {
		for _, sp := range []string{"29362", "29363"} {
			if n := r.Received[lp][sp]; n != count {
				t.Errorf("received[%s][%s] = %d, want %d", lp, sp, n, count)
			}
		}
	}
}

// wantUsageErrors checks that run (mode's) refuses each of argss with a
// usage error.
func wantUsageErrors(t *testing.T, mode string, run func(context.Context, []string) (any, error), argss [][]string) {
	t.Helper()
	for _, args := range argss {
		if _, err := run(context.Background(), args); err == nil {
			t.Errorf("%s %q: no error", mode, args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%s %q: %v is not a usage error", mode, args, err)
		}
	}
}

func TestSendBadFlags(t *testing.T) {
	wantUsageErrors(t, "send", runSend, [][]string{
		{"--dst", "1.2.3.4"},
		{"--dst", "127.0.0.1:9", "--flows", "0"},
		{"--dst", "127.0.0.1:9", "--pps", "-1"},
		{"--dst", "127.0.0.1:9", "--duration", "11m"},
		{"--dst", "127.0.0.1:9", "--sport", "65535", "--flows", "2"},
		{"--dst", "127.0.0.1:9", "--align", "2m"},
		{"--dst", "127.0.0.1:9", "--align", "-1s"},
		{"--dst", "127.0.0.1:9", "--batch", "0"},
		{"--dst", "127.0.0.1:9", "--pps", "0", "--times"},
		{"--bogus"},
	})
}

func TestTCPLoopback(t *testing.T) {
	ctx := context.Background()
	rc := background(func() (any, error) {
		return runTCPServe(ctx, []string{"--listen", "[::1]:29330", "--duration", "5s"})
	})
	waitListening(t, "tcp", "[::1]:29330")
	sr, err := runTCPSend(ctx, []string{"--dst", "[::1]:29330", "--bytes", "1000003", "--duration", "5s"})
	if err != nil {
		t.Fatal(err)
	}
	o := <-rc
	if o.err != nil {
		t.Fatal(o.err)
	}
	s, r := sr.(*TCPResult), o.r.(*TCPResult)
	if s.Bytes != 1000003 || r.Bytes != s.Bytes || r.SHA256 != s.SHA256 {
		t.Errorf("sent %d %s, received %d %s", s.Bytes, s.SHA256, r.Bytes, r.SHA256)
	}
}

// out is what a mode run in the background returned.
type out struct {
	r   any
	err error
}

// background runs f in a goroutine; its result arrives on the channel.
func background(f func() (any, error)) <-chan out {
	rc := make(chan out, 1)
	go func() {
		r, err := f()
		rc <- out{r, err}
	}()
	return rc
}

// TestPacedLateWakeup: a paced sender woken after the end of its run (a
// loaded machine) still sends every packet that was due before the end:
// the rate over the run is exact.
func TestPacedLateWakeup(t *testing.T) {
	const pps, flows = 100, 2
	sent := make([]int, flows)
	targets := make([][]target, flows)
	for f := range targets {
		targets[f] = []target{{write: func() error { sent[f]++; return nil }}}
	}
	o := &sendOpts{pps: pps, flows: flows}
	// A run of 1 s that ended 1 s ago.
	start := time.Now().Add(-2 * time.Second)
	end := start.Add(time.Second)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var counted uint64
	count := func(f int, ns int64, n uint64) { counted += n }
	note := func(int, int64, uint64) {}
	paced(context.Background(), o, targets, start, end, timer, &SendResult{}, count, note)
	for f, n := range sent {
		if n != pps {
			t.Errorf("flow %d: sent %d, want %d (its rate × the run)", f, n, pps)
		}
	}
	if counted != pps*flows {
		t.Errorf("counted %d, want %d", counted, pps*flows)
	}
}
