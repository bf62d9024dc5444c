package main

import (
	"fmt"
	"io"
)

// Placeholder until replay.go lands: whoever writes replay.go deletes this file.
func runReplay(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "packetshaper: replay mode is not implemented yet")
	return 2
}
