//go:build linux && race

package fastpath

// raceEnabled: TestFlood runs a million packets through the program and the
// Go engine, one goroutine: under the race detector it checks nothing more
// and takes about 50 s instead of 11. scripts/test.sh runs it without
// -race, in its unit stage.
const raceEnabled = true
