package flows

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestDecodeReply: Reply is what the kernel answers with and carries no
// data: SYN-ACK, RST, a bare ACK, ICMP and ICMPv6 errors; never a SYN, a
// FIN, a segment with payload (however small, whatever the copy range
// cut), a fragment, or an echo.
func TestDecodeReply(t *testing.T) {
	tcp := func(flags string, payload int) []byte {
		tc := &layers.TCP{SrcPort: 80, DstPort: 40000, Window: 1024}
		for _, f := range flags {
			switch f {
			case 'S':
				tc.SYN = true
			case 'A':
				tc.ACK = true
			case 'R':
				tc.RST = true
			case 'F':
				tc.FIN = true
			case 'P':
				tc.PSH = true
			}
		}
		ip := ip4("10.0.0.2", "10.0.0.1", layers.IPProtocolTCP)
		tc.SetNetworkLayerForChecksum(ip)
		return serialize(t, ip, tc, gopacket.Payload(make([]byte, payload)))
	}
	icmp4 := func(typ uint8) []byte {
		return serialize(t, ip4("10.0.0.2", "10.0.0.1", layers.IPProtocolICMPv4),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0)}, gopacket.Payload(make([]byte, 28)))
	}
	icmp6 := func(typ uint8) []byte {
		ip := ip6("2001:db8::2", "2001:db8::1", layers.IPProtocolICMPv6)
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		ic.SetNetworkLayerForChecksum(ip)
		return serialize(t, ip, ic, gopacket.Payload(make([]byte, 48)))
	}
	firstFrag := tcp("SA", 0)
	firstFrag[6] |= 0x20 // MF
	for _, c := range []struct {
		name string
		b    []byte
		cut  int // copy range (0: whole)
		want bool
	}{
		{"syn-ack", tcp("SA", 0), 0, true},
		{"rst", tcp("R", 0), 0, true},
		{"rst-ack", tcp("RA", 0), 0, true},
		{"bare ack", tcp("A", 0), 0, true},
		{"syn", tcp("S", 0), 0, false},
		{"fin-ack", tcp("FA", 0), 0, false},
		{"ack with one byte", tcp("A", 1), 0, false},
		{"psh-ack with data, cut to its header", tcp("PA", 1000), 40, false},
		{"syn-ack, first fragment", firstFrag, 0, false},
		{"icmp port unreachable", icmp4(3), 0, true},
		{"icmp time exceeded", icmp4(11), 0, true},
		{"icmp parameter problem", icmp4(12), 0, true},
		{"icmp echo reply", icmp4(0), 0, false},
		{"icmp echo request", icmp4(8), 0, false},
		{"icmpv6 unreachable", icmp6(1), 0, true},
		{"icmpv6 packet too big", icmp6(2), 0, true},
		{"icmpv6 echo reply", icmp6(129), 0, false},
		{"icmpv6 neighbour advertisement", icmp6(136), 0, false},
		{"udp", udp4(t, "10.0.0.2", "10.0.0.1", 53, 5000, 0), 0, false},
	} {
		b := c.b
		if c.cut > 0 {
			b = b[:c.cut]
		}
		var p Packet
		p.Decode(b)
		if p.Reply != c.want {
			t.Errorf("%s: Reply %v, want %v (%+v)", c.name, p.Reply, c.want, p)
		}
	}
}

// TestOwnerless: each no-owner choice on a "no owner" key.
func TestOwnerless(t *testing.T) {
	var reply, data Packet
	reply.Decode(serialize(t, ip4("10.0.0.2", "10.0.0.9", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload(make([]byte, 28))))
	data.Decode(udp4(t, "10.0.0.2", "10.0.0.9", 53, 5000, 10))
	for _, c := range []struct {
		no               NoOwner
		acceptR, acceptD bool
		key              string
	}{
		{NoOwnerAcceptReplies, true, false, "no owner"},
		{NoOwnerLimit, false, false, "no owner"},
		{NoOwnerAccept, true, true, "no owner"},
		{NoOwnerKeyByDst, false, false, "no owner dst 10.0.0.0"},
	} {
		kc := KeyConfig{Mode: ByUID | NoAddr, NoOwner: c.no, DstPrefix4: 24}
		if err := kc.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			p    *Packet
			want bool
		}{{&reply, c.acceptR}, {&data, c.acceptD}} {
			var k Key
			kc.KeyTo(&k, p.p)
			kc.SetOwner(&k, 0, 0, 0, false)
			if got := kc.Ownerless(&k, p.p); got != p.want {
				t.Errorf("%v: reply %v: accept %v, want %v", c.no, p.p.Reply, got, p.want)
			}
			if !p.want && k.String() != c.key {
				t.Errorf("%v: key %q, want %q", c.no, k.String(), c.key)
			}
		}
		if n, err := ParseNoOwner(c.no.String()); err != nil || n != c.no {
			t.Errorf("ParseNoOwner(%q) = %v, %v", c.no.String(), n, err)
		}
	}
	if err := (&KeyConfig{Mode: Src, NoOwner: NoOwnerAccept}).Validate(); err == nil {
		t.Errorf("no-owner on a src key: no error")
	}
}
