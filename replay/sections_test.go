package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// ngSection is one pcapng section, written by hand (pcapgo's writer fixes
// the timestamp resolution at nanoseconds): a section header, one
// interface and its packets. bigEndian writes the whole section in that
// byte order (a capture made on another machine).
type ngSection struct {
	name      string
	lt        layers.LinkType
	tsresol   uint8 // if_tsresol: 10^-n s, or 2^-(n&0x7f) s with the top bit
	bigEndian bool
	pkts      []ngPkt
}

type ngPkt struct {
	ts   uint64 // in the interface's units
	data []byte
}

func (s ngSection) bytes() []byte {
	var o binary.AppendByteOrder = binary.LittleEndian
	if s.bigEndian {
		o = binary.BigEndian
	}
	block := func(typ uint32, body []byte) []byte {
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
		n := uint32(12 + len(body))
		b := o.AppendUint32(nil, typ)
		b = o.AppendUint32(b, n)
		b = append(b, body...)
		return o.AppendUint32(b, n)
	}
	opt := func(code uint16, v []byte) []byte {
		b := o.AppendUint16(nil, code)
		b = o.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	shb := o.AppendUint32(nil, 0x1a2b3c4d)
	shb = o.AppendUint16(shb, 1)
	shb = o.AppendUint16(shb, 0)
	shb = o.AppendUint64(shb, ^uint64(0)) // section length unknown
	out := block(0x0a0d0d0a, shb)
	idb := o.AppendUint16(nil, uint16(s.lt))
	idb = o.AppendUint16(idb, 0)
	idb = o.AppendUint32(idb, 0) // snaplen: none
	if s.name != "" {
		idb = append(idb, opt(2, []byte(s.name))...) // if_name
	}
	idb = append(idb, opt(9, []byte{s.tsresol})...) // if_tsresol
	idb = append(idb, opt(0, nil)...)               // opt_endofopt
	out = append(out, block(1, idb)...)
	for _, p := range s.pkts {
		epb := o.AppendUint32(nil, 0) // interface 0
		epb = o.AppendUint32(epb, uint32(p.ts>>32))
		epb = o.AppendUint32(epb, uint32(p.ts))
		epb = o.AppendUint32(epb, uint32(len(p.data)))
		epb = o.AppendUint32(epb, uint32(len(p.data)))
		epb = append(epb, p.data...)
		out = append(out, block(6, epb)...)
	}
	return out
}

// rawUDP is an IPv4/UDP packet 10.0.0.1:sport > 10.0.0.2:53 (no link
// header: LINKTYPE_RAW).
func rawUDP(sport uint16) []byte { return udpFrame(sport, 16)[14:] }

// sectionsPolicy limits each interface's traffic apart: mgmt at 100/s
// with a burst of 1 (its packets, 10 ms apart on its clock, all pass: the
// rule sees them at that pace only if its timestamps are read in its own
// section's resolution), eth0 at 2 packets a flow and no refill to speak of.
const sectionsPolicy = `
[[rule]]
name  = "mgmt"
match = { iif = ["mgmt"] }
pps   = 100
burst = 1

[[rule]]
name  = "eth0"
match = { iif = ["eth0"] }
pps   = 0.001
burst = 2
`

// twoSections is eth0's 20 Ethernet frames at nanosecond resolution, then
// mgmt's 20 raw IP packets at microsecond resolution, 10 ms apart, big
// endian, after them in time.
func twoSections() (eth0, mgmt ngSection) {
	eth0 = ngSection{name: "eth0", lt: layers.LinkTypeEthernet, tsresol: 9}
	mgmt = ngSection{name: "mgmt", lt: layers.LinkType(linkTypeRaw), tsresol: 6, bigEndian: true}
	const t0 = 1_700_000_000
	for k := range 20 {
		eth0.pkts = append(eth0.pkts, ngPkt{ts: t0*1e9 + uint64(k)*1e6, data: udpFrame(uint16(1000+k%3), 16)})
		mgmt.pkts = append(mgmt.pkts, ngPkt{ts: (t0+1)*1e6 + uint64(k)*10_000, data: rawUDP(uint16(2000 + k%3))})
	}
	return eth0, mgmt
}

// replaySections replays each capture of caps through one replayer (as
// one run over several files) and returns its summary and rules.
func replaySections(t testing.TB, caps ...[]byte) (Summary, []RuleSummary) {
	t.Helper()
	comp, eng := compileEngine(t, "sections.toml", sectionsPolicy)
	r := New(eng, Options{IfaceID: comp.IfaceID})
	for i, c := range caps {
		if err := r.Replay(fmt.Sprintf("capture %d", i), bytes.NewReader(c), int64(len(c))); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	return r.Summary(), r.Rules()
}

// TestReplaySections (issue 29): a two-section pcapng (cat eth0.pcapng
// mgmt.pcapng), its sections of different interfaces, link types,
// timestamp resolutions and byte orders, replays as its sections replayed
// apart: every packet decided by its own section's interface. Before, the
// interface names were cached per file and mgmt's packets were decided as
// eth0's: the mgmt rule accepted 0 of 20.
func TestReplaySections(t *testing.T) {
	eth0, mgmt := twoSections()
	a, b := eth0.bytes(), mgmt.bytes()
	whole := append(append([]byte(nil), a...), b...)
	sum, rules := replaySections(t, whole)
	_, ra := replaySections(t, a)
	_, rb := replaySections(t, b)
	if sum.Packets != 40 || sum.NonIP != 0 || sum.Malformed != 0 || sum.Unmatched != 0 {
		t.Fatalf("summary %+v: want 40 packets, each an IP packet some rule matched", sum)
	}
	for i, r := range rules {
		apart := ra[i].RuleStats
		apart.Packets += rb[i].Packets
		apart.Accepted += rb[i].Accepted
		apart.Dropped += rb[i].Dropped
		if r.Packets != apart.Packets || r.Accepted != apart.Accepted || r.Dropped != apart.Dropped {
			t.Errorf("rule %s: packets %d, accepted %d, dropped %d; its sections replayed apart: %d, %d, %d",
				r.Name, r.Packets, r.Accepted, r.Dropped, apart.Packets, apart.Accepted, apart.Dropped)
		}
	}
	if rules[0].Accepted != 20 || rules[1].Accepted != 6 || rules[1].Dropped != 14 {
		t.Errorf("mgmt accepted %d of 20, eth0 accepted %d and dropped %d of 20: want 20, and 6 and 14 (three flows, a burst of 2 each)",
			rules[0].Accepted, rules[1].Accepted, rules[1].Dropped)
	}
}

// FuzzSections: two sections of any interface names, link types (Ethernet
// or raw IP), timestamp resolutions, byte orders and packet counts, one
// after the other: every record reads with its own section's interface
// name, link type and time (or, for a resolution whose times do not fit,
// an error), and Section counts the sections.
func FuzzSections(f *testing.F) {
	f.Add("eth0", "mgmt", uint8(9), uint8(6), false, true, true, false, uint8(3), uint8(2))
	f.Add("", "x", uint8(0x80|20), uint8(3), true, true, false, false, uint8(0), uint8(1))
	f.Add("eth0", "eth0", uint8(0), uint8(0), false, false, false, false, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, nameA, nameB string, resA, resB uint8, rawA, rawB, beA, beB bool, nA, nB uint8) {
		if len(nameA) > 64 || len(nameB) > 64 || bytes.IndexByte([]byte(nameA+nameB), 0) >= 0 {
			return
		}
		secs := [2]ngSection{{name: nameA, tsresol: resA, bigEndian: beA}, {name: nameB, tsresol: resB, bigEndian: beB}}
		var want []struct {
			name string
			lt   layers.LinkType
			sec  uint64
		}
		var capture []byte
		for i, raw := range []bool{rawA, rawB} {
			s := &secs[i]
			s.lt = layers.LinkTypeEthernet
			if raw {
				s.lt = layers.LinkType(linkTypeRaw)
			}
			for k := range int([]uint8{nA, nB}[i] % 8) {
				d := udpFrame(uint16(k), 8)
				if raw {
					d = rawUDP(uint16(k))
				}
				s.pkts = append(s.pkts, ngPkt{ts: uint64(1000 + k), data: d})
				want = append(want, struct {
					name string
					lt   layers.LinkType
					sec  uint64
				}{s.name, s.lt, uint64(i)})
			}
			capture = append(capture, s.bytes()...)
		}
		rd, err := NewReader(bytes.NewReader(capture))
		if err != nil {
			if len(secs[0].pkts) == 0 {
				return // a resolution pcapgo refuses, read with the first section
			}
			t.Fatalf("NewReader: %v", err)
		}
		for i := 0; ; i++ {
			_, ci, lt, err := rd.Next()
			if err == io.EOF {
				if i != len(want) {
					t.Fatalf("%d records, want %d", i, len(want))
				}
				return
			}
			if err != nil {
				return // a timestamp resolution pcapgo refuses: an error, not a wrong packet
			}
			if i >= len(want) {
				t.Fatalf("more records than the %d written", len(want))
			}
			w := want[i]
			if got := rd.InterfaceName(ci.InterfaceIndex); got != w.name || lt != w.lt || rd.Section() != w.sec {
				t.Fatalf("record %d: interface %q, link type %v, section %d; want %q, %v, %d", i, got, lt, rd.Section(), w.name, w.lt, w.sec)
			}
		}
	})
}
