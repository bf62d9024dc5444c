//go:build race

package main

// raceEnabled: the race detector multiplies memory, which the RSS tests
// measure.
const raceEnabled = true
