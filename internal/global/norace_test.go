//go:build !race

package global

const raceEnabled = false
