// Command psend is packetshaper's bounded traffic generator and counter for
// the end-to-end tests, the demo and manual experiments. It is not part of
// the product.
//
//	psend send --dst 10.0.0.2:9000 --flows 4 --pps 500 --duration 3s [--align 1s]
//	psend send --dst 10.0.0.2:9000 --pps 0 --count 1000000 --duration 5s
//	psend send6x --dst [fd00::2]:9000 --flows 4 --pps 500 --dstopts 16 (or --dstopt-len 600)
//	psend send --dst 10.0.0.2:9000 --pps 500 --size 1400 --gso 40
//	psend sendtun --tun tun0 --src 10.250.69.1 --dst 10.250.69.2:9000 --pps 500
//	psend send6hbh --dst [fd00::2]:9000 --iface veth0 --dst-mac 02:00:00:00:00:02 --pps 500 --size 1344
//	psend recv --listen :9000 --duration 10s --idle 1s
//	psend tcp-serve --listen :9100 --duration 10s
//	psend tcp-send --dst 10.0.0.2:9100 --bytes 4000000
//	psend report --send send.json --recv recv.json --rate 100 --burst 5
//
// send: UDP from N flows (one socket per flow, source ports --sport,
// --sport+1, …) at R packets/s per flow and destination, packets interleaved
// across flows, for a bounded time and/or count, starting at once or (--align)
// on the next multiple of a duration since the Unix epoch; --pps 0 sends
// unpaced, in sendmmsg batches, and reports the rate achieved; --gso N sends N
// datagrams per sendmsg (UDP GSO), --sizes alternates payload sizes. send6x: the
// same for IPv6 UDP datagrams carrying a chain of Destination Options headers
// (through a raw socket; root); send6hbh: IPv6 UDP datagrams with payload
// length 0 behind a hop-by-hop header (through a packet socket; root);
// sendtun: whole IPv4 UDP packets written into a tun device, received on it
// as from its wire (root). recv:
// counts UDP datagrams per listening port and source port. tcp-serve/tcp-send: one TCP transfer of
// deterministic bytes, both sides print the byte count and SHA-256. report:
// a per-flow table of sent, arrived and expected from saved send and recv
// output (for the demo).
//
// Every mode stops by itself: durations are capped at 10 minutes, and SIGINT
// or SIGTERM make it stop early and still print its result. Results are one
// JSON object on stdout; progress and errors go to stderr. Bad flags give one
// line on stderr and exit status 2.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// maxDuration bounds every mode, whatever the flags say.
const maxDuration = 10 * time.Minute

// psendMode is a mode of psend: its name and what runs it, which returns
// what psend prints as JSON (nothing for nil).
type psendMode struct {
	name string
	run  func(context.Context, []string) (any, error)
}

// modes are psend's modes, in the order usage names them.
var modes = []psendMode{
	{"send", runSend}, {"send6x", runSend6x}, {"send6hbh", runSend6hbh}, {"sendtun", runSendTun},
	{"recv", runRecv}, {"tcp-serve", runTCPServe}, {"tcp-send", runTCPSend},
	{"tcp-connect", runTCPConnect}, {"tcp-accept", runTCPAccept}, {"report", runReport},
}

func usage() {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.name
	}
	fmt.Fprintf(os.Stderr, "usage: psend %s [flags]   (psend MODE --help for flags)\n", strings.Join(names, "|"))
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mode := os.Args[1]
	if mode == "-h" || mode == "--help" || mode == "help" {
		usage()
		return
	}
	i := slices.IndexFunc(modes, func(m psendMode) bool { return m.name == mode })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "psend: unknown mode %q\n", mode)
		usage()
		os.Exit(2)
	}
	res, err := modes[i].run(ctx, os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "psend %s: %v\n", os.Args[1], err)
		if _, ok := err.(usageError); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
	if res == nil {
		return
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "psend: %v\n", err)
		os.Exit(1)
	}
}

// usageError marks bad flags (exit status 2).
type usageError struct{ error }

func badFlag(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// boundDuration checks a duration flag: positive and at most maxDuration.
func boundDuration(name string, d time.Duration) error {
	if d <= 0 || d > maxDuration {
		return badFlag("--%s %v: must be > 0 and <= %v", name, d, maxDuration)
	}
	return nil
}
