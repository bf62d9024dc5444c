package main

import (
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recvBackground runs psend recv --listen listen with extra in the
// background and returns once each of its ports is bound, so that a sender
// started next loses nothing to a receiver not yet listening (a fixed sleep
// did, on a loaded machine).
func recvBackground(t *testing.T, ctx context.Context, listen string, extra ...string) <-chan out {
	t.Helper()
	rc := background(func() (any, error) {
		return runRecv(ctx, append([]string{"--listen", listen}, extra...))
	})
	waitListening(t, "udp", listen)
	return rc
}

// waitListening waits, at most 10 s, until every port of the
// comma-separated addresses is bound by a socket of proto ("udp" or
// "tcp", listening) in this network namespace, as /proc/net/PROTO and
// PROTO6 list them.
func waitListening(t *testing.T, proto, addrs string) {
	t.Helper()
	var want []uint16
	for _, a := range strings.Split(addrs, ",") {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			t.Fatalf("waitListening %q: %v", a, err)
		}
		want = append(want, ap.Port())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		bound := boundPorts(proto)
		missing := 0
		for _, p := range want {
			if !bound[p] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: not bound after 10 s", proto, addrs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// boundPorts reads the local ports of /proc/net/PROTO and PROTO6: for tcp
// only the listening sockets (state 0A).
func boundPorts(proto string) map[uint16]bool {
	ports := map[uint16]bool{}
	for _, f := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || (proto == "tcp" && fs[3] != "0A") {
				continue
			}
			_, hex, ok := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hex, 16, 16); ok && err == nil {
				ports[uint16(p)] = true
			}
		}
	}
	return ports
}
