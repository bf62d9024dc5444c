package main

import (
	"errors"
	"fmt"
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
