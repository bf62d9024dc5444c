package replay

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// pcapOut writes records to a pcap file whose header (and so link type) is
// written with the first record, or to a pcapng file with one interface
// per link type, added as each first appears.
type pcapOut struct {
	name string
	buf  *bufio.Writer
	ng   bool
	// pcap
	w  *pcapgo.Writer
	lt layers.LinkType
	// pcapng
	ngw    *pcapgo.NgWriter
	ngLink []layers.LinkType // link type of each interface
	open   bool
}

func (o *pcapOut) init(w io.Writer, name string, ng bool) {
	o.buf = bufio.NewWriterSize(w, 256<<10)
	o.name = name
	o.ng = ng
	if !ng {
		o.w = pcapgo.NewWriterNanos(o.buf)
	}
}

// start writes the file header, naming lt as the first link type.
func (o *pcapOut) start(lt layers.LinkType) error {
	o.open = true
	if !o.ng {
		o.lt = lt
		return o.w.WriteFileHeader(MaxRecord, lt)
	}
	var err error
	o.ngw, err = pcapgo.NewNgWriterInterface(o.buf, ngInterface(lt), pcapgo.NgWriterOptions{
		SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper replay"},
	})
	o.ngLink = append(o.ngLink, lt)
	return err
}

func ngInterface(lt layers.LinkType) pcapgo.NgInterface {
	return pcapgo.NgInterface{Name: LinkTypeName(lt), LinkType: lt, SnapLength: MaxRecord, TimestampResolution: 9}
}

func (o *pcapOut) write(data []byte, ci *gopacket.CaptureInfo, lt layers.LinkType) error {
	if !o.open {
		if err := o.start(lt); err != nil {
			return fmt.Errorf("writing %s packets: %w", o.name, err)
		}
	}
	c := *ci
	c.CaptureLength = len(data)
	if c.Length < c.CaptureLength {
		c.Length = c.CaptureLength
	}
	if c.Timestamp.IsZero() {
		// pcapgo writes the wall clock for a zero time; keep it
		// deterministic.
		c.Timestamp = time.Unix(0, 0)
	}
	var err error
	if o.ng {
		c.InterfaceIndex = -1
		for i, l := range o.ngLink {
			if l == lt {
				c.InterfaceIndex = i
				break
			}
		}
		if c.InterfaceIndex < 0 {
			if c.InterfaceIndex, err = o.ngw.AddInterface(ngInterface(lt)); err != nil {
				return fmt.Errorf("writing %s packets: %w", o.name, err)
			}
			o.ngLink = append(o.ngLink, lt)
		}
		c.AncillaryData = nil
		err = o.ngw.WritePacket(c, data)
	} else {
		if lt != o.lt {
			return fmt.Errorf("writing %s packets: link type %s (%d) differs from the file's %s (%d); a pcap file holds one link type (write .pcapng instead)",
				o.name, LinkTypeName(lt), uint16(lt), LinkTypeName(o.lt), uint16(o.lt))
		}
		err = o.w.WritePacket(c, data)
	}
	if err != nil {
		return fmt.Errorf("writing %s packets: %w", o.name, err)
	}
	return nil
}

// flush writes the header of an empty output (link type of the first
// record never seen: Ethernet) and flushes the buffers.
func (o *pcapOut) flush() error {
	if o.buf == nil {
		return nil
	}
	if !o.open {
		if err := o.start(layers.LinkTypeEthernet); err != nil {
			return fmt.Errorf("writing %s packets: %w", o.name, err)
		}
	}
	if o.ngw != nil {
		if err := o.ngw.Flush(); err != nil {
			return fmt.Errorf("writing %s packets: %w", o.name, err)
		}
	}
	if err := o.buf.Flush(); err != nil {
		return fmt.Errorf("writing %s packets: %w", o.name, err)
	}
	return nil
}
