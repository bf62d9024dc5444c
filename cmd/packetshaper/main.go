// Command packetshaper is a per-flow packet shaper for Linux.
//
//	packetshaper [--queue N|N-M] [limiter flags]      live: decide packets from NFQUEUE
//	packetshaper replay [limiter flags] FILE...       offline: replay pcap/pcapng captures
//
// main only wires flags to packages: the live path is in live.go (package
// nfq), replay in replay.go (package replay), the limiter flags both share in
// flags.go.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const synopsis = `packetshaper — per-flow packet shaper for Linux (NFQUEUE) and for captures

Usage:
  packetshaper [--queue N|N-M] [limiter flags] [live flags]   shape live traffic from NFQUEUE (root)
  packetshaper replay [limiter flags] [replay flags] FILE...  replay pcap/pcapng captures offline
  packetshaper version

Run "packetshaper --help" or "packetshaper replay --help" for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "replay":
			return runReplay(args[1:], stdout, stderr)
		case "version", "--version":
			fmt.Fprintln(stdout, "packetshaper", version)
			return 0
		case "help":
			fmt.Fprint(stdout, synopsis)
			return 0
		}
	}
	return runLive(args, stdout, stderr)
}
