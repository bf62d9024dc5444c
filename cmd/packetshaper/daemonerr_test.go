package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/daemon"
)

// TestDaemonErrorFlags: every part the daemon's errors name has its flag
// here, and daemonError says the flag in place of the part, through
// UsageError and other wrapping.
func TestDaemonErrorFlags(t *testing.T) {
	for _, p := range daemon.Parts {
		if daemonFlags[p] == "" {
			t.Errorf("daemon.Part %q has no flag in daemonFlags", p)
		}
	}
	inner := errors.New("sock: exists and is not a socket")
	wrapped := fmt.Errorf("starting: %w", &daemon.PartError{Part: daemon.PartControl, Err: inner})
	if got, want := daemonError(wrapped), "--control-socket: sock: exists and is not a socket"; got != want {
		t.Errorf("daemonError = %q, want %q", got, want)
	}
	if got, want := daemonError(errors.New("a\nb")), "a b"; got != want {
		t.Errorf("daemonError of a plain error = %q, want %q", got, want)
	}
}

// TestFastpathAttachModeError: a mode --fastpath-attach does not take is
// one line naming the flag (fastpath.ParseAttachMode names the mode only).
func TestFastpathAttachModeError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--pps", "10", "--fastpath-attach", "x"}, &out, &errb)
	want := "packetshaper: --fastpath-attach: attach mode \"x\" is not one of auto, tcx, tc"
	if msg := errb.String(); code != 2 || !strings.HasPrefix(msg, want) || strings.Count(msg, "\n") != 1 {
		t.Errorf("--fastpath-attach x: %d, %q; want 2 and one line starting %q", code, msg, want)
	}
}
