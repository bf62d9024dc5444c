//go:build race

package global

// raceEnabled: under the race detector everything runs several times
// slower, and the refreshers may be late by more than a lease lasts:
// the tests that measure how close to the limit the hosts get allow more.
const raceEnabled = true
