// Package timing is how tests treat figures of speed (latency, lateness,
// CPU, throughput, how long something took): a test asserts behaviour
// (counts, bounds on what is delivered, ordering) and checks its timing
// figures with Check, which enforces them only when PS_STRICT_TIMING=1
// (scripts/bench.sh sets it and reports the outcome beside the machine's
// load). On a shared, loaded machine such a figure says more about the
// other processes than about packetshaper, so `go test` logs a figure
// over its bound rather than failing.
//
// Only tests import this package.
package timing

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Env is the environment variable that makes Check enforce its bounds.
const Env = "PS_STRICT_TIMING"

// Strict reports whether timing bounds are enforced (Env=1).
func Strict() bool { return os.Getenv(Env) == "1" }

// Load is the machine's 1-, 5- and 15-minute load averages, as
// /proc/loadavg gives them, or "?".
func Load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Check checks one timing figure: ok is whether it is within its bound,
// and format and args say what the figure and the bound are. Not ok: with
// Strict, t.Errorf; otherwise t.Logf, saying that the bound is not
// enforced. Ok: with Strict, t.Logf "timing: ...: ok", so that
// scripts/bench.sh reports every figure it enforced; otherwise nothing.
// The load average is given beside each.
func Check(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok && !Strict() {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if ok {
		t.Logf("timing: %s (load average %s): ok", msg, Load())
		return
	}
	if Strict() {
		t.Errorf("timing: %s (load average %s)", msg, Load())
		return
	}
	t.Logf("timing, not enforced (%s=1 enforces it; scripts/bench.sh does): %s (load average %s)", Env, msg, Load())
}
