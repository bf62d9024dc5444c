package main

import (
	"fmt"
	"io"
)

// Placeholder until live.go lands: whoever writes live.go deletes this file.
func runLive(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "packetshaper: live mode is not implemented yet")
	return 2
}
