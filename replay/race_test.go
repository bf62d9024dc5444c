//go:build race

package replay

// raceEnabled: the memory-bound tests (TestConstantMemory,
// TestHugeLengthsBounded, TestHeldBytesBounded) stream hundreds of MB
// through replay code that starts no goroutine: under the race detector
// they check nothing more and take five times as long. scripts/test.sh
// runs them without -race, in its unit stage.
const raceEnabled = true
