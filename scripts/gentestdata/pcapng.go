package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// mixedNg: a pcapng with four interfaces of different link types and
// timestamp resolutions (Ethernet in ns, raw IP in µs, Linux SLL in ns,
// BSD NULL in 2^-20 s), their packets interleaved.
func mixedNg() ([]byte, error) {
	var buf bytes.Buffer
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper gentestdata"}}
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet}, opts)
	if err != nil {
		return nil, err
	}
	for _, intf := range []pcapgo.NgInterface{{Name: "tun0", LinkType: 101}, {Name: "any", LinkType: 113}, {Name: "lo0", LinkType: 0}} {
		if _, err := w.AddInterface(intf); err != nil {
			return nil, err
		}
	}
	ips := mixIP()
	for i := range 16 {
		p := ips[i%len(ips)]
		iface := i % 4
		et := uint16(0x0800)
		fam := uint32(2)
		if p[0]>>4 == 6 {
			et, fam = 0x86dd, 30
		}
		var data []byte
		switch iface {
		case 0:
			data = eth6or4(p)
		case 1:
			data = p
		case 2:
			data = append(sllHeader(et), p...)
		case 3:
			data = append(binary.LittleEndian.AppendUint32(nil, fam), p...)
		}
		t := t0.Add(time.Duration(i)*50*time.Millisecond + 125*time.Microsecond)
		// NgWriter always writes nanoseconds and declares if_tsresol 9;
		// patchTsresol below changes the declarations of interfaces 1
		// and 3, so give it the count in their units.
		switch iface {
		case 1:
			t = time.Unix(0, t.UnixNano()/1000)
		case 3:
			t = time.Unix(0, int64(float64(t.UnixNano())/1e9*(1<<20)))
		}
		ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(data), InterfaceIndex: iface}
		if err := w.WritePacket(ci, data); err != nil {
			return nil, err
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if err := patchTsresol(b, 1, 6); err != nil {
		return nil, err
	}
	if err := patchTsresol(b, 3, 0x80|20); err != nil {
		return nil, err
	}
	return b, nil
}

// patchTsresol sets the if_tsresol option of the idb-th interface
// description block of a little-endian pcapng to v.
func patchTsresol(b []byte, idb int, v byte) error {
	n := 0
	for i := 0; i+12 <= len(b); {
		typ, l := binary.LittleEndian.Uint32(b[i:]), int(binary.LittleEndian.Uint32(b[i+4:]))
		if typ == 1 {
			if n == idb {
				for o := i + 16; o+4 <= i+l-4; {
					code, ol := binary.LittleEndian.Uint16(b[o:]), int(binary.LittleEndian.Uint16(b[o+2:]))
					if code == 9 && ol == 1 {
						b[o+4] = v
						return nil
					}
					o += 4 + (ol+3)&^3
				}
			}
			n++
		}
		i += l
	}
	return fmt.Errorf("no if_tsresol in interface %d", idb)
}
