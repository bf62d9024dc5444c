package replay

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/shaper"
)

// expectShape is each packet's departure (ns) through a shaping token
// bucket, or -1 for a drop, from the generic cell rate algorithm in its
// virtual scheduling form (ITU-T I.371), independent of the shaper's
// token arithmetic: with T = 1/rate and τ = (burst−1)·T, a packet at t
// departs at max(t, TAT − τ) if that is at most maxDelay away, and then
// TAT = max(TAT, t) + T; TAT starts at the first arrival. T must be whole
// nanoseconds.
func expectShape(ts []int64, rate, burst, maxDelay int64) []int64 {
	T := int64(1e9) / rate
	tau := (burst - 1) * T
	tat := ts[0]
	out := make([]int64, len(ts))
	for i, t := range ts {
		dep := max(t, tat-tau)
		if dep-t > maxDelay {
			out[i] = -1
			continue
		}
		out[i] = dep
		tat = max(tat, t) + T
	}
	return out
}

// TestShaping replays flows at known constant rates through a shaping
// rule and checks every packet against expectShape: its verdict line (with
// its delay), its place and timestamp in --write-accepted (departure
// order, departure time), and the totals.
func TestShaping(t *testing.T) {
	fl := constFlows()
	type pkt struct {
		t, dep int64
		sport  uint16
	}
	var pkts []pkt
	const rate, burst, maxDelay = 10, 4, int64(300 * time.Millisecond)
	for _, f := range fl {
		ts := f.times()
		for i, dep := range expectShape(ts, rate, burst, maxDelay) {
			pkts = append(pkts, pkt{ts[i], dep, f.sport})
		}
	}
	sort.SliceStable(pkts, func(i, j int) bool { return pkts[i].t < pkts[j].t })
	recs := make([]rec, len(pkts))
	for i, p := range pkts {
		recs[i] = rec{p.t, udpFrame(p.sport, 10)}
	}
	capture := pcapBytes(t, layers.LinkTypeEthernet, recs)

	eng, err := shaper.New(shaper.Config{Rate: rate, Burst: burst, Shape: true, MaxDelay: maxDelay})
	if err != nil {
		t.Fatal(err)
	}
	var verdicts, acc bytes.Buffer
	r := New(eng, Options{Verdicts: &verdicts, Accepted: &acc})
	if err := r.Replay("shape.pcap", bytes.NewReader(capture), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}

	// Verdicts, in capture order.
	var delayed, dropped, accepted uint64
	sc := bufio.NewScanner(&verdicts)
	for i := 0; sc.Scan(); i++ {
		p := pkts[i]
		want := fmt.Sprintf("%d ACCEPT", i+1)
		switch {
		case p.dep < 0:
			want = fmt.Sprintf("%d DROP", i+1)
			dropped++
		case p.dep > p.t:
			want += " +" + strconv.FormatInt(p.dep-p.t, 10)
			delayed++
			accepted++
		default:
			accepted++
		}
		if sc.Text() != want {
			t.Fatalf("verdict line %d: %q, want %q", i+1, sc.Text(), want)
		}
	}
	s := r.Summary()
	if s.Accepted != accepted || s.Dropped != dropped || s.Delayed != delayed || s.ShapeOverflow != dropped || delayed == 0 || dropped == 0 {
		t.Errorf("summary %+v; want accepted %d, dropped (overflow) %d, delayed %d", s, accepted, dropped, delayed)
	}
	if s.Delays.Count != delayed || s.Delays.Max > maxDelay || s.Delays.Max != maxDelay {
		t.Errorf("delays %+v: want %d of them, the longest exactly max-delay %d", s.Delays, delayed, maxDelay)
	}

	// --write-accepted: the accepted packets in departure order (for equal
	// departures, arrival order), each stamped with its departure.
	var want []pkt
	for _, p := range pkts {
		if p.dep >= 0 {
			want = append(want, p)
		}
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].dep < want[j].dep })
	rd, err := pcapgo.NewReader(&acc)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		data, ci, err := rd.ReadPacketData()
		if err == io.EOF {
			if i != len(want) {
				t.Errorf("--write-accepted holds %d packets, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Fatalf("--write-accepted holds more than %d packets", len(want))
		}
		sport := binary.BigEndian.Uint16(data[14+20:])
		if ts := ci.Timestamp.UnixNano(); ts != want[i].dep || sport != want[i].sport {
			t.Fatalf("accepted packet %d: port %d at %d, want port %d at %d (arrived %d)", i, sport, ts, want[i].sport, want[i].dep, want[i].t)
		}
	}
}

// TestShapingNoAllocs: replaying through a shaping rule with every output
// on allocates nothing per packet once the held packets' buffers exist.
func TestShapingNoAllocs(t *testing.T) {
	capture := manyFlows(t, 20000, 100)
	eng, err := shaper.New(shaper.Config{Rate: 5000, Burst: 1, Shape: true, MaxDelay: int64(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	r := New(eng, Options{Verdicts: io.Discard, Accepted: io.Discard, Dropped: io.Discard})
	next := packetStep(t, r, capture)
	for range 10000 {
		next()
	}
	if a := testing.AllocsPerRun(5000, next); a != 0 {
		t.Errorf("%v allocations per shaped packet", a)
	}
	if s := r.Summary(); s.Delayed == 0 {
		t.Errorf("nothing was delayed: %+v", s)
	}
}
