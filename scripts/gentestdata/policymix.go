package main

import (
	"bytes"
	"sort"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// policyMixClasses describe policy-mix.pcapng: traffic for each class of
// testdata/policy-mix.toml, 2 s of it. Exported for the tests that check

var policyMixClasses = []struct {
	Name string
	// Packets: source, protocol, destination port, rate, interface.
	Src      []string
	TCP      bool
	Port     uint16
	Rate     float64
	Iface    int
	Fragment bool // a non-first IPv4 fragment: ports unreadable
}{
	{Name: "mgmt-ssh", Src: []string{"10.9.1.5"}, TCP: true, Port: 22, Rate: 50},
	{Name: "mgmt-v6", Src: []string{"fd00:9::7"}, TCP: true, Port: 8080, Rate: 20},
	{Name: "lab", Src: []string{"10.20.0.1"}, Port: 5000, Rate: 10, Iface: 1},
	{Name: "dns", Src: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}, Port: 53, Rate: 20},
	{Name: "web-80", Src: []string{"198.51.100.7"}, TCP: true, Port: 80, Rate: 20},
	{Name: "web-443", Src: []string{"198.51.100.8"}, TCP: true, Port: 443, Rate: 20},
	{Name: "frag-from-mgmt", Src: []string{"10.9.1.5"}, TCP: true, Port: 22, Rate: 10, Fragment: true},
	{Name: "other", Src: []string{"203.0.113.9"}, Port: 9000, Rate: 50},
}

// policyMix writes policyMixClasses as a pcapng capture on two Ethernet
// interfaces, eth0 and eth1, for 2 s.
func policyMix() ([]byte, error) {
	var buf bytes.Buffer
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper gentestdata"}}
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet}, opts)
	if err != nil {
		return nil, err
	}
	if _, err := w.AddInterface(pcapgo.NgInterface{Name: "eth1", LinkType: layers.LinkTypeEthernet}); err != nil {
		return nil, err
	}
	type rec struct {
		t     time.Time
		data  []byte
		iface int
	}
	var rs []rec
	for ci, c := range policyMixClasses {
		for si, src := range c.Src {
			n := int(2 * c.Rate)
			start := time.Duration(ci*1000+si*250) * time.Microsecond
			for k := 0; k < n; k++ {
				t := t0.Add(start + time.Duration(float64(k)*float64(time.Second)/c.Rate))
				dst := "10.0.1.1"
				if strings.Contains(src, ":") {
					dst = "fd00::1"
				}
				sport := 40000 + uint16(si)
				var p []byte
				switch {
				case c.Fragment:
					ip := ip4(src, dst, layers.IPProtocolTCP)
					ip.Id, ip.FragOffset = uint16(k), 8
					p = serialize(ip, gopacket.Payload(make([]byte, 24)))
				case c.TCP && dst == "fd00::1":
					ip := ip6(src, dst, layers.IPProtocolTCP)
					tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(c.Port), Seq: uint32(k), ACK: true, Window: 65535, DataOffset: 5}
					tc.SetNetworkLayerForChecksum(ip)
					p = serialize(ip, tc, gopacket.Payload(make([]byte, 20)))
				case c.TCP:
					p = tcp4(src, dst, sport, c.Port, uint32(k), 20)
				default:
					p = udp4(src, dst, sport, c.Port, 30)
				}
				rs = append(rs, rec{t: t, data: eth6or4(p), iface: c.Iface})
			}
		}
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].t.Before(rs[b].t) })
	for _, r := range rs {
		ci := gopacket.CaptureInfo{Timestamp: r.t, CaptureLength: len(r.data), Length: len(r.data), InterfaceIndex: r.iface}
		if err := w.WritePacket(ci, r.data); err != nil {
			return nil, err
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
