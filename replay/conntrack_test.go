package replay

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// ctPkt builds an IPv4 packet: TCP with flags, UDP, or ICMP of a type
// (an error quoting inner).
func ctPkt(proto uint8, src, dst byte, sport, dport uint16, flags uint8, inner []byte) []byte {
	b := make([]byte, 20, 80)
	b[0] = 0x45
	b[8], b[9] = 64, proto
	b[12], b[13], b[14], b[15] = 10, 0, 0, src
	b[16], b[17], b[18], b[19] = 10, 0, 0, dst
	switch proto {
	case flows.ProtoTCP:
		t := make([]byte, 20)
		binary.BigEndian.PutUint16(t, sport)
		binary.BigEndian.PutUint16(t[2:], dport)
		t[12], t[13] = 5<<4, flags
		b = append(b, t...)
	case flows.ProtoUDP:
		u := make([]byte, 8)
		binary.BigEndian.PutUint16(u, sport)
		binary.BigEndian.PutUint16(u[2:], dport)
		b = append(b, u...)
	case flows.ProtoICMP:
		b = append(b, flags, 0, 0, 0, 0, 0, 0, 0)
		b = append(b, inner...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

func (t *tracker) of(b []byte, now int64) shaper.CtState {
	var p flows.Packet
	p.Decode(b)
	return t.state(&p, b, now)
}

const (
	syn    = flows.TCPSyn
	synack = flows.TCPSyn | flows.TCPAck
	ack    = flows.TCPAck
	fin    = flows.TCPFin | flows.TCPAck
)

// TestTracker: each protocol's states, both directions one entry, the
// kernel's timeouts, eviction of the least recently seen, and the
// counts where a capture makes it differ from the kernel's.
func TestTracker(t *testing.T) {
	const s = int64(1e9)
	tr := newTracker(4)
	steps := []struct {
		name string
		pkt  []byte
		at   int64
		want shaper.CtState
	}{
		{"syn", ctPkt(6, 1, 2, 40000, 22, syn, nil), 0, shaper.CtNew},
		{"syn retransmitted", ctPkt(6, 1, 2, 40000, 22, syn, nil), 1 * s, shaper.CtNew},
		{"syn-ack", ctPkt(6, 2, 1, 22, 40000, synack, nil), 1 * s, shaper.CtEstablished},
		{"ack", ctPkt(6, 1, 2, 40000, 22, ack, nil), 1 * s, shaper.CtEstablished},
		{"data a day later", ctPkt(6, 2, 1, 22, 40000, ack, nil), 86400 * s, shaper.CtEstablished},
		{"mid-connection: picked up", ctPkt(6, 3, 2, 50000, 80, ack, nil), 86400 * s, shaper.CtEstablished},
		{"udp query", ctPkt(17, 1, 2, 5353, 53, 0, nil), 86401 * s, shaper.CtNew},
		{"udp again before a reply", ctPkt(17, 1, 2, 5353, 53, 0, nil), 86401 * s, shaper.CtNew},
		{"udp reply", ctPkt(17, 2, 1, 53, 5353, 0, nil), 86402 * s, shaper.CtEstablished},
		{"udp after", ctPkt(17, 1, 2, 5353, 53, 0, nil), 86403 * s, shaper.CtEstablished},
		{"port unreachable about the udp", ctPkt(1, 2, 1, 0, 0, 3, ctPkt(17, 1, 2, 5353, 53, 0, nil)), 86403 * s, shaper.CtRelated},
		{"port unreachable about nothing", ctPkt(1, 2, 1, 0, 0, 3, ctPkt(17, 1, 2, 9, 9, 0, nil)), 86403 * s, shaper.CtInvalid},
		{"udp after 121 s: expired, new again", ctPkt(17, 1, 2, 5353, 53, 0, nil), 86524 * s, shaper.CtNew},
		// The table holds 4: the ssh connection (seen at 86400 s) is
		// the least recently seen and goes.
		{"a fourth conversation", ctPkt(17, 1, 4, 1, 2, 0, nil), 86525 * s, shaper.CtNew},
		{"a fifth: evicts the ssh connection", ctPkt(17, 1, 5, 1, 2, 0, nil), 86526 * s, shaper.CtNew},
		{"ssh after its eviction: picked up", ctPkt(6, 1, 2, 40000, 22, ack, nil), 86527 * s, shaper.CtEstablished},
		{"fin", ctPkt(6, 1, 2, 40000, 22, fin, nil), 86528 * s, shaper.CtEstablished},
		{"after 121 s of closing: picked up", ctPkt(6, 1, 2, 40000, 22, ack, nil), 86649 * s, shaper.CtEstablished},
	}
	for _, st := range steps {
		if got := tr.of(st.pkt, st.at); got != st.want {
			t.Errorf("%s: state %d, want %d", st.name, got, st.want)
		}
	}
	got := tr.Stats()
	// One way: the fourth and fifth conversations and the udp one after
	// its expiry. Evicted: the ssh connection, then the mid-connection
	// one when ssh came back.
	want := CtStats{New: 7, Established: 9, Related: 1, Invalid: 1, PickedUp: 3, Evicted: 2, OneWay: 3}
	if got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	checkTracker(t, tr)
}

// checkTracker: the index, the entries, the free list and the recency
// list agree, and the table holds at most max.
func checkTracker(t *testing.T, tr *tracker) {
	t.Helper()
	if len(tr.idx) > tr.max || len(tr.idx)+len(tr.free) != len(tr.ents) || len(tr.ents) > tr.max {
		t.Fatalf("%d indexed, %d free, %d entries, max %d", len(tr.idx), len(tr.free), len(tr.ents), tr.max)
	}
	n, prev := 0, int32(-1)
	for i := tr.head; i >= 0; i = tr.ents[i].next {
		if tr.ents[i].prev != prev || tr.idx[tr.ents[i].key] != i {
			t.Fatalf("recency list broken at entry %d", i)
		}
		prev = i
		if n++; n > len(tr.ents) {
			t.Fatal("recency list loops")
		}
	}
	if n != len(tr.idx) || tr.tail != prev {
		t.Fatalf("recency list holds %d of %d entries (tail %d, last %d)", n, len(tr.idx), tr.tail, prev)
	}
}

// TestTrackerNoAllocs: tracking, churning a full table included, does not
// allocate.
func TestTrackerNoAllocs(t *testing.T) {
	tr := newTracker(1000)
	pkts := make([][]byte, 3000)
	for i := range pkts {
		pkts[i] = ctPkt(6, byte(i), 200, uint16(i), 80, []uint8{syn, synack, ack}[i%3], nil)
	}
	now, i := int64(0), 0
	if a := testing.AllocsPerRun(20000, func() {
		now += 1000
		tr.of(pkts[i%len(pkts)], now)
		i++
	}); a != 0 {
		t.Errorf("tracking allocates %v times per packet", a)
	}
	checkTracker(t, tr)
}

// FuzzTracker: any sequence of packets (each 4 bytes of the input: the
// ends, ports, protocol and flags, and the time since the last) keeps the
// table consistent and bounded and gives every packet one state.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0x01, 0x02, 0x00, 0x10, 0x12, 0x02, 0x01, 0x12})
	f.Add(bytes.Repeat([]byte{0x37, 0x81, 0xff, 0x03}, 40))
	f.Fuzz(func(t *testing.T, in []byte) {
		tr := newTracker(8)
		now := int64(0)
		var n uint64
		for len(in) >= 4 {
			c := in[:4]
			in = in[4:]
			proto := []uint8{6, 17, 1, 47}[c[0]&3]
			a, b := 1+c[0]>>2&3, 1+c[0]>>4&3
			sp, dp := uint16(c[1]&7), uint16(c[1]>>3&7)
			var inner []byte
			if proto == 1 && c[2]&1 == 1 {
				inner = ctPkt(17, b, a, dp, sp, 0, nil)
			}
			now += int64(c[3]) * int64(c[3]) * 1e9
			tr.of(ctPkt(proto, a, b, sp, dp, c[2], inner), now)
			n++
			checkTracker(t, tr)
		}
		s := tr.Stats()
		if s.New+s.Established+s.Related+s.Invalid != n {
			t.Fatalf("%d packets, states %+v", n, s)
		}
	})
}

// synsWithoutAck counts, independently of flows and the tracker
// (gopacket's decoders), the TCP packets of a capture with SYN set and ACK
// clear; hidden, the packets whose protocol flows cannot find (an IPv6
// extension header chain cut short; not a later fragment, which only limit
// rules take), which a drop rule's protocol constraint takes whatever it
// is.
func synsWithoutAck(t *testing.T, name string) (syns, hidden, packets int) {
	t.Helper()
	rd, err := openCaptureErr(t, name)
	if err != nil {
		return 0, 0, -1 // not a capture replay reads: its error is its test's
	}
	for {
		data, _, lt, err := rd.Next()
		if err != nil {
			break
		}
		packets++
		if isSyn(data, lt) {
			syns++
		}
		if ip, ok := Decap(lt, data); ok {
			var fp flows.Packet
			fp.Decode(ip)
			if fp.Class != flows.Malformed && fp.Proto == flows.ProtoUnknown && !fp.Fragment {
				hidden++
			}
		}
	}
	return syns, hidden, packets
}

// sharedNormal holds the shared captures of normal traffic, when they are
// beside the repository.
var sharedNormal = filepath.Join("..", "..", "shared", "pcaps", "normal")

func ctCaptures(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "*.pcap*"))
	shared := sharedNormal
	if ents, err := os.ReadDir(shared); err != nil {
		t.Logf("no shared captures (%v): the repository's only", err)
	} else {
		for _, e := range ents {
			files = append(files, filepath.Join(shared, e.Name()))
		}
	}
	return files
}

// replayPolicy replays name through the policy src with connection
// tracking and returns the summary and the dropped records' indexes.
func replayPolicy(t *testing.T, src, name string) (Summary, *CtStats, map[int]bool, error) {
	t.Helper()
	_, eng := compileEngine(t, "p.toml", src)
	var v bytes.Buffer
	r := New(eng, Options{Verdicts: &v, Conntrack: true})
	err := r.ReplayFile(name)
	r.Flush()
	dropped := map[int]bool{}
	for _, l := range strings.Split(v.String(), "\n") {
		if i, ok := strings.CutSuffix(l, " DROP"); ok {
			n, _ := strconv.Atoi(i)
			dropped[n] = true
		}
	}
	return r.Summary(), r.Conntrack(), dropped, err
}

// TestConntrackCaptures: over the repository's captures and the shared
// ones, the tracker's new TCP packets (a drop rule for tcp ct-state new)
// are exactly the capture's SYNs without ACK as gopacket decodes them (and
// the packets whose protocol is hidden, which the rule takes by design).
func TestConntrackCaptures(t *testing.T) {
	const newTCP = "[[rule]]\nname = \"new\"\nmatch = { proto = [\"tcp\"], ct-state = [\"new\"] }\naction = \"drop\"\n"
	total := 0
	for _, name := range ctCaptures(t) {
		syns, hidden, n := synsWithoutAck(t, name)
		if n < 0 {
			continue
		}
		s, ct, _, _ := replayPolicy(t, newTCP, name)
		total += syns
		if int(s.Dropped) != syns+hidden {
			t.Errorf("%s: %d TCP packets new, %d SYNs without ACK and %d of a hidden protocol (%d records)", filepath.Base(name), s.Dropped, syns, hidden, n)
		}
		if syns > 0 || ct.PickedUp > 0 {
			t.Logf("%s: %d new TCP of %d packets; tracker %+v", filepath.Base(name), s.Dropped, s.Packets, *ct)
		}
	}
	if total == 0 {
		if _, err := os.Stat(sharedNormal); err != nil {
			t.Skipf("skipped: no capture had a SYN, and the shared ones, which have, are not there (%v): they live in ../shared/pcaps next to the repository", err)
		}
		t.Error("no capture had a SYN: the test checks nothing")
	}
}

// sshNew is the rule: new SSH connections, 6 per minute per
// source.
const sshNew = `
[[rule]]
name  = "ssh-new"
match = { proto = ["tcp"], dport = [22], ct-state = ["new"] }
key   = "src"
pps   = 0.1
burst = 6
`

// TestSSHNewConnections: the rule drops no packet of an established SSH
// session in the captures that hold SSH (every packet it drops is a SYN
// without ACK), where the same rule without ct-state drops most of them.
func TestSSHNewConnections(t *testing.T) {
	seen := 0
	for _, name := range ctCaptures(t) {
		if !strings.Contains(name, "ssh") {
			continue
		}
		seen++
		s, ct, dropped, err := replayPolicy(t, sshNew, name)
		if err != nil {
			t.Fatal(err)
		}
		plain, _, _, _ := replayPolicy(t, strings.Replace(sshNew, `, ct-state = ["new"]`, "", 1), name)
		syns := synIndexes(t, name)
		for i := range dropped {
			if !syns[i] {
				t.Errorf("%s: record %d dropped is not a SYN without ACK", name, i)
			}
		}
		t.Logf("%s: ssh-new dropped %d of %d packets (tracker %+v); without ct-state %d", filepath.Base(name), s.Dropped, s.Packets, *ct, plain.Dropped)
		if plain.Dropped <= s.Dropped {
			t.Errorf("%s: without ct-state the rule dropped %d, with %d: the capture does not show the difference", name, plain.Dropped, s.Dropped)
		}
	}
	if seen == 0 {
		t.Skip("skipped: no SSH capture (the shared captures are in ../shared/pcaps)")
	}
}

func synIndexes(t *testing.T, name string) map[int]bool {
	rd := openCapture(t, name)
	out := map[int]bool{}
	for i := 1; ; i++ {
		data, _, lt, err := rd.Next()
		if err == io.EOF || err != nil {
			break
		}
		if isSyn(data, lt) {
			out[i] = true
		}
	}
	return out
}

// isSyn: gopacket's decoders find a TCP header with SYN set and ACK clear
// in the IP packet under the record's link layer (Decap finds where it
// starts: gopacket does not decode every link type replay reads).
func isSyn(data []byte, lt layers.LinkType) bool {
	ip, ok := Decap(lt, data)
	if !ok || len(ip) == 0 {
		return false
	}
	first := layers.LayerTypeIPv4
	if ip[0]>>4 == 6 {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(ip, first, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	return ok && tcp.SYN && !tcp.ACK
}
