package testutil

import (
	"os"
	"testing"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// ExclusiveEnv, set to 1, says that the tests have the machine to
// themselves: one package at a time (go test -p 1), nothing else heavy
// running. scripts/test.sh sets it; so does PS_STRICT_TIMING=1
// (scripts/bench.sh). Plain go test ./... runs packages side by side and
// sets neither.
const ExclusiveEnv = "PS_TEST_EXCLUSIVE"

// Exclusive reports whether the run has the machine to itself
// (ExclusiveEnv=1 or strict timing).
func Exclusive() bool { return os.Getenv(ExclusiveEnv) == "1" || timing.Strict() }

// NeedExclusive skips t, saying why, unless the run has the machine to
// itself: for the tests whose counts hold only without other packages'
// tests beside them (floods, throughput, pacing, a stalled queue's
// timing). scripts/test.sh runs them.
func NeedExclusive(t testing.TB, why string) {
	t.Helper()
	if !Exclusive() {
		t.Skipf("skipped: needs the machine to itself (%s): %s=1, as scripts/test.sh sets, runs it", why, ExclusiveEnv)
	}
}
