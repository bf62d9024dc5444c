package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
)

// serveAt serves ctlHandler on a control socket at dir/name until the test
// ends, and returns a function that stops it early.
func serveAt(t *testing.T, dir, name string) func() {
	t.Helper()
	ln, err := control.Listen(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { control.Serve(ctx, ln, ctlHandler{}, nil); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(func() { cancel(); <-done })
	return stop
}

// TestFlowsStatusFindShaper: with no --queue nor --control-socket, flows
// and status ask the one shaper running with a default control socket,
// here one on --queue 6 (packetshaper-6.sock); with several, they list
// them one a line and ask none; an explicit flag still wins.
func TestFlowsStatusFindShaper(t *testing.T) {
	dir := t.TempDir()
	old := ctlDir
	ctlDir = dir
	t.Cleanup(func() { ctlDir = old })
	q6 := filepath.Base(control.DefaultPath("6"))
	serveAt(t, dir, q6)
	ctl := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		return out.String(), errb.String(), code
	}
	out, errs, code := ctl("flows")
	if code != 0 || strings.Count(out, "udp 10.0.0.") != 5 {
		t.Fatalf("flows with a shaper on queue 6 and no flags: %d\n%s%s", code, out, errs)
	}
	if out, errs, code := ctl("status"); code != 0 || !strings.Contains(out, "packetshaper v7") {
		t.Fatalf("status with a shaper on queue 6 and no flags: %d\n%s%s", code, out, errs)
	}
	// An explicit --queue still wins: queue 0's socket is not there.
	if _, errs, code := ctl("flows", "--queue", "0"); code != 1 || !strings.Contains(errs, "packetshaper.sock") {
		t.Errorf("flows --queue 0: %d %q, want 1 and queue 0's socket named", code, errs)
	}
	// Two shapers: both listed, neither asked.
	stop := serveAt(t, dir, filepath.Base(control.DefaultPath("0-3")))
	for _, cmd := range []string{"flows", "status"} {
		out, errs, code := ctl(cmd)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != 2 || out != "" || len(lines) != 3 || !strings.Contains(lines[0], "2 shapers are running") ||
			lines[1] != filepath.Join(dir, "packetshaper-0-3.sock") || lines[2] != filepath.Join(dir, q6) {
			t.Errorf("%s with two shapers: %d, stdout %q, stderr:\n%s\nwant 2, the two sockets listed one a line", cmd, code, out, errs)
		}
	}
	if out, errs, code := ctl("flows", "--control-socket", filepath.Join(dir, q6)); code != 0 || strings.Count(out, "udp 10.0.0.") != 5 {
		t.Errorf("flows --control-socket with two shapers: %d\n%s%s", code, out, errs)
	}
	if _, errs, code := ctl("flows", "--queue", "0-3"); code != 0 {
		t.Errorf("flows --queue 0-3 with two shapers: %d %s", code, errs)
	}
	// The other one gone: the one left is found again.
	stop()
	if out, errs, code := ctl("flows"); code != 0 || strings.Count(out, "udp 10.0.0.") != 5 {
		t.Errorf("flows after the second shaper stopped: %d\n%s%s", code, out, errs)
	}
}

// shadowHandler serves one flow of a shadow rule and one of a marking
// rule, as the daemon lists them.
type shadowHandler struct{ ctlHandler }

func (shadowHandler) Flows(_ context.Context, _ string, emit func(*control.Flow) error) error {
	for _, f := range []control.Flow{
		{Rule: "trial", Key: "udp 10.0.0.1:1 > 10.0.0.2:2", Packets: 10, Accepted: 10, ShadowDropped: 7, Unit: "packets"},
		{Rule: "marking", Key: "udp 10.0.0.3:1 > 10.0.0.2:2", Packets: 9, Accepted: 9, Marked: 4, Unit: "packets"},
	} {
		if err := emit(&f); err != nil {
			return err
		}
	}
	return nil
}

// TestFlowsShadowColumns: packetshaper flows shows shadow-dropped and
// marked packets in their own columns, not as dropped.
func TestFlowsShadowColumns(t *testing.T) {
	path := serveCtl(t, shadowHandler{})
	var out, errb bytes.Buffer
	if code := run([]string{"flows", "--control-socket", path}, &out, &errb); code != 0 {
		t.Fatalf("flows: %d %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("flows:\n%s", out.String())
	}
	cols := strings.Fields(lines[0])
	want := map[string]map[string]string{
		"trial":   {"PACKETS": "10", "ACCEPTED": "10", "DROPPED": "0", "SHADOW_DROPPED": "7", "MARKED": "0"},
		"marking": {"PACKETS": "9", "ACCEPTED": "9", "DROPPED": "0", "SHADOW_DROPPED": "0", "MARKED": "4"},
	}
	for _, l := range lines[1:] {
		// The key has spaces ("udp a > b"): fields after it are counted
		// from the end.
		f := strings.Fields(l)
		rule := f[1]
		tail := f[len(f)-(len(cols)-3):]
		for i, c := range cols[3:] {
			if w, ok := want[rule][c]; ok && tail[i] != w {
				t.Errorf("rule %s: %s = %s, want %s\n%s", rule, c, tail[i], w, out.String())
			}
		}
	}
}
