//go:build linux && !race

package fastpath

const raceEnabled = false
