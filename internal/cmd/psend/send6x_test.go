package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/packetshaper/packetshaper/flows"
)

// linuxAcceptsDstOpts applies the rules Linux's ip6_parse_tlv
// (net/ipv6/exthdrs.c) checks a Destination Options header against, with
// net.ipv6.max_dst_opts_number at its default of 8; it returns "" or what
// is wrong.
func linuxAcceptsDstOpts(h []byte) string {
	if len(h) < 8 || len(h) != (int(h[1])+1)*8 {
		return "length field does not match"
	}
	pad, tlvs := 0, 0
	for b := h[2:]; len(b) > 0; {
		if b[0] == 0 { // Pad1
			if pad++; pad > 7 {
				return "more than 7 bytes of padding in a row"
			}
			b = b[1:]
			continue
		}
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return "option runs past the header"
		}
		n := 2 + int(b[1])
		switch {
		case b[0] == 1: // PadN
			if pad += n; pad > 7 {
				return "more than 7 bytes of padding in a row"
			}
			if !bytes.Equal(b[2:n], make([]byte, n-2)) {
				return "PadN with non-zero bytes"
			}
		case b[0]>>6 != 0:
			return "option that a receiver not knowing it must not skip"
		default:
			if tlvs++; tlvs > 8 {
				return "more than 8 options"
			}
			pad = 0
		}
		b = b[n:]
	}
	return ""
}

func TestDstOptsHeader(t *testing.T) {
	for n := 8; n <= maxDstOptLen; n += 8 {
		h := dstOptsHeader(n, 17)
		if len(h) != n || h[0] != 17 {
			t.Fatalf("dstOptsHeader(%d): %d bytes, next header %d", n, len(h), h[0])
		}
		if why := linuxAcceptsDstOpts(h); why != "" {
			t.Errorf("dstOptsHeader(%d): Linux would drop it: %s", n, why)
		}
	}
	// An 8-byte header is one PadN, as RFC 8200's example.
	if h := dstOptsHeader(8, 60); !bytes.Equal(h, []byte{60, 0, 1, 4, 0, 0, 0, 0}) {
		t.Errorf("8-byte header % x", h)
	}
	// The checker itself: 14 bytes of PadN is what Linux drops.
	if linuxAcceptsDstOpts([]byte{17, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) == "" {
		t.Error("the checker accepts 14 bytes of padding")
	}
}

// TestDstOptsDatagram: the chain and UDP header send6x writes, behind an
// IPv6 header, decode (flows.Decode) to the right ports, and the UDP
// checksum is the one gopacket computes.
func TestDstOptsDatagram(t *testing.T) {
	src, dst := netip.MustParseAddr("fd00::1"), netip.MustParseAddrPort("[fd00::2]:9000")
	payload := []byte("0123456789abcdefg") // odd length: the checksum pads
	for _, c := range []struct{ n, hlen int }{{1, 8}, {16, 8}, {16, 16}, {1, 600}, {2, 2048}} {
		b := dstOptsDatagram(src, dst, 10007, c.n, c.hlen, payload)
		if len(b) != c.n*c.hlen+8+len(payload) {
			t.Fatalf("%d×%d: %d bytes", c.n, c.hlen, len(b))
		}
		ip := make([]byte, 40, 40+len(b))
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(len(b)))
		ip[6], ip[7] = protoDstOpts, 64
		s, d := src.As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		pkt := append(ip, b...)
		var p flows.Packet
		p.Decode(pkt)
		if p.Class != flows.IPv6 || p.Proto != flows.ProtoUDP || p.NoPorts || p.SrcPort != 10007 || p.DstPort != 9000 {
			t.Errorf("%d×%d: decoded %+v", c.n, c.hlen, p)
		}

		udp := &layers.UDP{SrcPort: 10007, DstPort: 9000}
		if err := udp.SetNetworkLayerForChecksum(&layers.IPv6{SrcIP: src.AsSlice(), DstIP: dst.Addr().AsSlice(), NextHeader: layers.IPProtocolUDP}); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, udp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		if got := b[c.n*c.hlen:]; !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%d×%d: UDP header and payload\n% x\nwant (gopacket)\n% x", c.n, c.hlen, got[:8], buf.Bytes()[:8])
		}
	}
}

// TestSend6xLoopback sends the chains over lo to a UDP socket: the kernel
// accepts them. Needs root for the raw socket.
func TestSend6xLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("send6x needs root (a raw socket); CI runs as root")
	}
	ctx := context.Background()
	for i, args := range [][]string{{"--dstopts", "16"}, {"--dstopt-len", "600"}, {"--dstopts", "2", "--dstopt-len", "2048"}} {
		rc := recvBackground(t, ctx, "[::1]:29350", "--duration", "10s", "--idle", "1s")
		// Bounded by count, with time to spare: a loaded machine may
		// stall the sender past a short duration.
		sr, err := runSend6x(ctx, append([]string{"--dst", "[::1]:29350", "--flows", "3", "--sport", "29351", "--pps", "100",
			"--count", "30", "--duration", "5s"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		s := sr.(*SendResult)
		o := <-rc
		if o.err != nil {
			t.Fatal(o.err)
		}
		r := o.r.(*RecvResult)
		if s.Sent != 90 || s.Errors != 0 || r.Total != s.Sent {
			t.Errorf("case %d %q: sent %d (errors %d), received %d; want 90, 0, 90", i, args, s.Sent, s.Errors, r.Total)
		}
		for _, sp := range []string{"29351", "29352", "29353"} {
			if n := r.Received["29350"][sp]; n != 30 {
				t.Errorf("case %d: received from %s: %d, want 30", i, sp, n)
			}
		}
	}
}

func TestSend6xBadFlags(t *testing.T) {
	wantUsageErrors(t, "send6x", runSend6x, [][]string{
		{"--dst", "127.0.0.1:9"},
		{"--dst", "[::1]:9", "--dstopts", "0"},
		{"--dst", "[::1]:9", "--dstopts", "65"},
		{"--dst", "[::1]:9", "--dstopt-len", "4"},
		{"--dst", "[::1]:9", "--dstopt-len", "2049"},
		{"--dst", "[::1]:9", "--dstopts", "3", "--dstopt-len", "2048"},
		{"--dst", "[::1]:9", "--src", "10.0.0.1"},
		{"--dst", "[::1]:9", "--seq"},
	})
}
