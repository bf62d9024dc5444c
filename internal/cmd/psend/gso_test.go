package main

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/inetsum"
)

// TestSendGSO: with --gso 4 each sendmsg carries 4 datagrams of --size,
// which arrive as 4 datagrams of that size (over lo, unprivileged); the
// sender counts and times each datagram.
func TestSendGSO(t *testing.T) {
	ctx := context.Background()
	rc := recvBackground(t, ctx, "127.0.0.1:29350", "--duration", "5s", "--idle", "400ms")
	sr, err := runSend(ctx, []string{"--dst", "127.0.0.1:29350", "--sport", "29351", "--size", "1000", "--gso", "4",
		"--pps", "50", "--count", "10", "--duration", "2s", "--times"})
	if err != nil {
		t.Fatal(err)
	}
	s := sr.(*SendResult)
	if f := s.Flows["29351"]; s.Sent != 40 || s.Errors != 0 || len(f.TimesUs) != 40 || f.TimesUs[3] != f.TimesUs[0] {
		t.Errorf("sent %d (errors %d), %d times (%v): want 40 datagrams, 0 errors, 40 times, 4 per sendmsg", s.Sent, s.Errors, len(f.TimesUs), f.TimesUs)
	}
	o := <-rc
	if o.err != nil {
		t.Fatal(o.err)
	}
	r := o.r.(*RecvResult)
	if r.Total != 40 || r.Sizes["1000"] != 40 {
		t.Errorf("received %d, sizes %v: want 40 datagrams of 1000 bytes", r.Total, r.Sizes)
	}
}

// TestSendSizes: --sizes alternates the payload sizes of a flow's packets.
func TestSendSizes(t *testing.T) {
	ctx := context.Background()
	rc := recvBackground(t, ctx, "127.0.0.1:29360", "--duration", "5s", "--idle", "400ms")
	if _, err := runSend(ctx, []string{"--dst", "127.0.0.1:29360", "--sport", "29361", "--sizes", "100,300,300",
		"--pps", "100", "--count", "9", "--duration", "2s"}); err != nil {
		t.Fatal(err)
	}
	o := <-rc
	if o.err != nil {
		t.Fatal(o.err)
	}
	if r := o.r.(*RecvResult); r.Sizes["100"] != 3 || r.Sizes["300"] != 6 {
		t.Errorf("sizes received %v: want 3 of 100, 6 of 300", r.Sizes)
	}
}

// TestSendOnlyFlagsRefused: --gso and --sizes need a paced send and are
// refused where they mean nothing.
func TestSendOnlyFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		mode string
		args []string
		want string
	}{
		{"send", []string{"--gso", "65"}, "--gso 65"},
		{"send", []string{"--gso", "4", "--pps", "0", "--count", "1"}, "paced only"},
		{"send", []string{"--gso", "64", "--size", "1100"}, "bytes in all"},
		{"send", []string{"--sizes", "1,x"}, "--sizes"},
		{"send6x", []string{"--gso", "4"}, "send only"},
		{"sendtun", []string{"--tun", "x", "--src", "10.0.0.1", "--sizes", "1"}, "send only"},
		{"sendtun", []string{"--tun", "x"}, "--src"},
	} {
		f := map[string]func(context.Context, []string) (any, error){"send": runSend, "send6x": runSend6x, "sendtun": runSendTun}[c.mode]
		dst := "127.0.0.1:29370"
		if c.mode == "send6x" {
			dst = "[::1]:29370"
		}
		_, err := f(context.Background(), append([]string{"--dst", dst, "--duration", "100ms"}, c.args...))
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want a usage error with %q", c.mode, c.args, err, c.want)
		}
	}
}

// TestIPv4UDPPacket: sendtun's packet has correct IPv4 and UDP checksums
// (each sums to 0xffff with its pseudo-header) and lengths.
func TestIPv4UDPPacket(t *testing.T) {
	src, dst := netip.MustParseAddr("10.250.69.1"), netip.MustParseAddrPort("10.250.69.2:9000")
	for _, n := range []int{0, 1, 57, 1400} {
		b := ipv4UDPPacket(src, dst, 10000, make([]byte, n))
		if len(b) != 28+n || int(binary.BigEndian.Uint16(b[2:])) != 28+n || int(binary.BigEndian.Uint16(b[24:])) != 8+n {
			t.Fatalf("size %d: lengths %d, %d, %d", n, len(b), binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint16(b[24:]))
		}
		if s := inetsum.Add(b[:20], 0); s != 0xffff {
			t.Errorf("size %d: IPv4 header sums to %#x", n, s)
		}
		var pseudo [12]byte
		copy(pseudo[:8], b[12:20])
		pseudo[9] = protoUDP
		binary.BigEndian.PutUint16(pseudo[10:], uint16(8+n))
		if s := inetsum.Add(b[20:], inetsum.Add(pseudo[:], 0)); s != 0xffff {
			t.Errorf("size %d: UDP sums to %#x", n, s)
		}
	}
}
