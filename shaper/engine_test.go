package shaper

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
)

// udp returns an IPv4 UDP packet from 10.a.b.c:sport to 10.255.0.1:9000
// with the given payload size, flow i's source being 10.(i>>16).(i>>8).i.
func udp(i int, sport uint16, payload int) []byte {
	b := make([]byte, 28+payload)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	copy(b[16:], []byte{10, 255, 0, 1})
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], 9000)
	binary.BigEndian.PutUint16(b[24:], uint16(8+payload))
	return b
}

func mustNew(t testing.TB, c Config) *Engine {
	t.Helper()
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEnginePerFlow(t *testing.T) {
	e := mustNew(t, Config{Rate: 10, Burst: 2})
	a, b := udp(1, 1000, 10), udp(2, 1000, 10)
	var got []Verdict
	for _, p := range [][]byte{a, a, a, b, b, b} {
		got = append(got, e.Decide(p, t0))
	}
	want := []Verdict{Accept, Accept, Drop, Accept, Accept, Drop}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: %v, want %v", i, got[i], want[i])
		}
	}
	s := e.Stats()
	if s != (Stats{Packets: 6, Accepted: 4, Dropped: 2, Flows: 2}) {
		t.Errorf("Stats = %+v", s)
	}
	n := 0
	e.Flows(func(_ int, k flows.Key, fs FlowStats) bool {
		n++
		if fs != (FlowStats{Packets: 3, Accepted: 2, Dropped: 1}) {
			t.Errorf("flow %v: %+v", k, fs)
		}
		return true
	})
	if n != 2 {
		t.Errorf("Flows saw %d flows", n)
	}
}

func TestEngineMalformed(t *testing.T) {
	for _, v := range []Verdict{Accept, Drop} {
		e, err := NewPolicy(Policy{Rules: []Rule{{Name: "r", Limit: Config{Rate: 1}}}, Malformed: v})
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		e.DecidePacket([]byte{0x45, 0, 0}, nil, t0, &d)
		if d.Verdict != v || d.Rule != -1 {
			t.Errorf("Malformed=%v: %+v", v, d)
		}
		if s := e.Stats(); s.Malformed != 1 || s.Packets != 1 || s.Flows != 0 {
			t.Errorf("Stats %+v", s)
		}
	}
}

func TestEngineBytes(t *testing.T) {
	// 8 kbit/s = 1000 B/s, burst 1500 B: a 1028-byte packet, then a
	// 428-byte one fit; a third doesn't.
	e := mustNew(t, Config{Rate: 1000, Bytes: true, Burst: 1500})
	big, small := udp(1, 1, 1000), udp(1, 1, 400)
	if e.Decide(big, t0) != Accept || e.Decide(small, t0) != Accept || e.Decide(small, t0) != Drop {
		t.Error("byte costs not charged by IP length")
	}
	// Default burst with a byte rate lets a 64 KiB packet through.
	e = mustNew(t, Config{Rate: 1000, Bytes: true})
	if e.Decide(udp(1, 1, 65000), t0) != Accept {
		t.Error("default byte burst below one large packet")
	}
}

func TestEngineConfigBounds(t *testing.T) {
	// A very high bit rate gets a default burst within the cap.
	if _, err := New(Config{Rate: 100e9 / 8, Bytes: true}); err != nil {
		t.Errorf("--bitrate 100gbit with the default burst: %v", err)
	}
	if _, err := New(Config{Rate: 1e6, Bytes: true, Burst: 1500}); err != nil {
		t.Errorf("a burst of one full-size packet: %v", err)
	}
}

// TestSlidingWindowExtremeTimes: times at the bottom of int64 (a capture
// with a wild timestamp offset) must not wrap the window's cut-off and let
// everything through.
func TestSlidingWindowExtremeTimes(t *testing.T) {
	l, _ := NewLimiter(LimiterConfig{Algorithm: SlidingWindow, Rate: 1, Window: sec})
	var s State
	now := int64(math.MinInt64)
	l.Reset(&s, now)
	if !l.Allow(&s, now, 1) || l.Allow(&s, now, 1) || l.Allow(&s, now+1, 1) {
		t.Error("sliding-window at MinInt64 does not hold its limit of 1")
	}
}

func TestEngineFlowExpiryResets(t *testing.T) {
	e := mustNew(t, Config{Rate: 0.001, Burst: 1, FlowTimeout: 10 * sec})
	p := udp(1, 1, 0)
	if e.Decide(p, t0) != Accept || e.Decide(p, t0+5*sec) != Drop {
		t.Fatal("burst 1 not enforced")
	}
	// Idle for more than the timeout: a new flow with a full bucket.
	if e.Decide(p, t0+16*sec) != Accept {
		t.Error("flow not forgotten after its timeout")
	}
	if e.Stats().Expired != 1 {
		t.Errorf("Expired = %d", e.Stats().Expired)
	}
}

func TestEngineConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Rate: 1, Bytes: true, Algorithm: SlidingWindow},
		{Rate: 1, MaxFlows: -1},
		{Rate: 1, Key: flows.KeyConfig{SrcPrefix4: 33}},
		{Rate: 1e6, Bytes: true, Burst: 1000},                                               // burst below a full-size packet
		{Rate: 62500, Bytes: true, Algorithm: FixedWindow, Window: int64(time.Millisecond)}, // 62 bytes per window
		{Rate: 5000, Algorithm: SlidingWindow, MaxFlows: 1 << 20},                           // 40 GiB of logs
		{Rate: 1, Key: flows.KeyConfig{Symmetric: true, SrcPrefix4: 24}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestDecideNoAllocs: zero allocations per Decide, for each algorithm,
// for known flows, new flows evicting old ones, and malformed packets.
func TestDecideNoAllocs(t *testing.T) {
	pkts := make([][]byte, 5000)
	for i := range pkts {
		pkts[i] = udp(i, 1, 8)
	}
	for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter} {
		e := mustNew(t, Config{Algorithm: algo, Rate: 100, MaxFlows: 1000})
		now := t0
		for _, p := range pkts {
			e.Decide(p, now) // fill the table
		}
		i := 0
		if n := testing.AllocsPerRun(20000, func() {
			now += 1000
			e.Decide(pkts[i%len(pkts)], now) // churns through a full table
			i++
		}); n != 0 {
			t.Errorf("%v: %v allocs per Decide", algo, n)
		}
		if n := testing.AllocsPerRun(100, func() { e.Decide([]byte{0x60, 1}, now) }); n != 0 {
			t.Errorf("%v malformed: %v allocs per Decide", algo, n)
		}
	}
}
