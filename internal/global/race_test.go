//go:build race

package global

// raceEnabled: under the race detector everything runs several times
// slower, and the refreshers may be late by more than a lease lasts:
// the test that measures how close to the limit the hosts get
// (TestLeasesThreeHosts) skips, and scripts/test.sh runs it without -race.
const raceEnabled = true
