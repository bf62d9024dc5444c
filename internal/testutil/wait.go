package testutil

import (
	"fmt"
	"testing"
	"time"
)

// pollMin and pollMax bound the pause between two checks of a condition:
// it starts short (most conditions hold soon) and doubles up to pollMax.
const (
	pollMin = time.Millisecond
	pollMax = 20 * time.Millisecond
)

// WaitFor checks cond until it holds or timeout has passed, and reports
// whether it held. cond is checked once more at the deadline, so a slow
// machine that overslept still gets its answer. The timeout is a bound on
// waiting, never a pass/fail bound on how fast something happens: give it
// a margin that holds on a loaded machine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := pollMin
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(pause)
		pause = min(2*pause, pollMax)
	}
}

// Eventually is WaitFor that fails the test (t.Fatalf) with the message
// format, args when cond does not hold within timeout. Call it from the
// test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !WaitFor(t, timeout, cond) {
		t.Fatalf("not within %v: %s", timeout, fmt.Sprintf(format, args...))
	}
}
