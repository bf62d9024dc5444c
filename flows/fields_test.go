package flows

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestDecodeMatchFields: DSCP from the IPv4 TOS and the IPv6 traffic class
// (ECN bits dropped), TCP flags only from a header that holds them (14
// bytes within the stated length), ICMP types only for ICMP in IPv4 and
// ICMPv6 in IPv6.
func TestDecodeMatchFields(t *testing.T) {
	ef4 := ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	ef4.TOS = 46<<2 | 3 // EF, ECN CE
	tc := &layers.TCP{SrcPort: 1, DstPort: 2, SYN: true, ACK: true, FIN: true}
	tc.SetNetworkLayerForChecksum(ef4)
	b4 := serialize(t, ef4, tc)
	var p Packet
	p.Decode(b4)
	if p.DSCP != 46 || !p.HasL4 || p.TCPFlags != TCPSyn|TCPAck|TCPFin {
		t.Errorf("ipv4 EF SYN-ACK-FIN: DSCP %d HasL4 %v flags %#x", p.DSCP, p.HasL4, p.TCPFlags)
	}
	af41 := ip6("2001:db8::1", "2001:db8::2", layers.IPProtocolUDP)
	af41.TrafficClass = 34<<2 | 1
	u := &layers.UDP{SrcPort: 1, DstPort: 2}
	u.SetNetworkLayerForChecksum(af41)
	p.Decode(serialize(t, af41, u))
	if p.DSCP != 34 || p.HasL4 {
		t.Errorf("ipv6 AF41 udp: DSCP %d HasL4 %v", p.DSCP, p.HasL4)
	}
	// Every cut of the TCP header: ports from 4 bytes, flags from 14.
	for n := 20 + 4; n < len(b4); n++ {
		c := append([]byte(nil), b4[:n]...)
		c[2], c[3] = byte(n>>8), byte(n) // the stated length cut too
		p.Decode(c)
		if want := n >= 20+14; p.HasL4 != want || (want && p.TCPFlags != TCPSyn|TCPAck|TCPFin) || (!want && p.TCPFlags != 0) {
			t.Errorf("tcp cut at %d bytes: HasL4 %v flags %#x", n, p.HasL4, p.TCPFlags)
		}
	}
	// Bytes past the stated length are not the header's.
	c := append([]byte(nil), b4...)
	c[2], c[3] = 0, 20+10
	p.Decode(c)
	if p.HasL4 {
		t.Errorf("flags read past the stated length")
	}
	// A later fragment has no transport header.
	f := append([]byte(nil), b4...)
	f[6], f[7] = 0, 2
	p.Decode(f)
	if p.HasL4 || p.TCPFlags != 0 {
		t.Errorf("later fragment: HasL4 %v flags %#x", p.HasL4, p.TCPFlags)
	}
	// ICMPv6 in IPv4: no type to trust.
	x := serialize(t, ip4("10.0.0.1", "10.0.0.2", layers.IPProtocolICMPv6), gopacket.Payload([]byte{128, 0, 0, 0, 0, 1, 0, 1}))
	p.Decode(x)
	if p.HasL4 {
		t.Errorf("icmpv6 in ipv4 read a type: %d", p.ICMPType)
	}
}
