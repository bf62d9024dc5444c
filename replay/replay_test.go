package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// udpFrame is an Ethernet/IPv4/UDP frame 10.0.0.1:sport > 10.0.0.2:53
// with n bytes of payload.
func udpFrame(sport uint16, n int) []byte {
	ip := make([]byte, 28+n)
	copy(ip, ipv4)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+n))
	return cat(ethHdr, be16(0x0800), ip)
}

// constFlow sends at a constant rate: packet k at start + k*1e9/rate ns.
type constFlow struct {
	sport uint16
	rate  int64 // packets per second
	start int64 // ns
	n     int
}

func (f constFlow) times() []int64 {
	ts := make([]int64, f.n)
	for k := range ts {
		ts[k] = f.start + int64(k)*1e9/f.rate
	}
	return ts
}

// constFlows are flows at rates from 3 to 1000 packets per second, each
// from its own port, over 4 s from start times of no common phase.
func constFlows() []constFlow {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	return []constFlow{
		{sport: 1001, rate: 3, start: t0 + 12_345_678, n: 12},
		{sport: 1002, rate: 10, start: t0 + 50_000_000, n: 40},
		{sport: 1003, rate: 13, start: t0 + 7_000_001, n: 52},
		{sport: 1004, rate: 25, start: t0 + 333_333_333, n: 100},
		{sport: 1005, rate: 60, start: t0 + 999_999_999, n: 240},
		{sport: 1006, rate: 1000, start: t0 + 1, n: 2500},
	}
}

// Expected accepted counts, each computed from the algorithm's definition
// (shaper's Algorithm docs) in exact rational arithmetic, independently of
// the shaper's code.

// tokenBucket: capacity burst, full at the flow's first packet, refilled
// continuously at rate per second; a packet is accepted iff the bucket
// holds 1, which is then taken.
// It is expectByteBucket with every packet of size 1.
func expectTokenBucket(ts []int64, rate, burst int64) int {
	ones := make([]int, len(ts))
	for i := range ones {
		ones[i] = 1
	}
	return expectByteBucket(ts, ones, rate, burst)
}

// fixedWindow: at most limit per window [k*W, (k+1)*W).
func expectFixedWindow(ts []int64, w, limit int64) int {
	per := map[int64]int64{}
	for _, t := range ts {
		per[t/w]++
	}
	n := 0
	for _, c := range per {
		n += int(min(c, limit))
	}
	return n
}

// slidingWindow: accepted iff fewer than limit accepted packets lie in
// [t-W, t].
func expectSlidingWindow(ts []int64, w, limit int64) int {
	var acc []int64
	for _, t := range ts {
		in := int64(0)
		for _, a := range acc {
			if a >= t-w && a <= t {
				in++
			}
		}
		if in < limit {
			acc = append(acc, t)
		}
	}
	return len(acc)
}

// slidingWindowCounter: accepted iff prev×(W−elapsed)/W + cur + 1 <= limit,
// prev being what the previous aligned window accepted (0 if the flow had
// no packet accepted in it), cur what the current one accepted so far.
func expectSlidingWindowCounter(ts []int64, w, limit int64) int {
	acc := map[int64]int64{}
	n := 0
	for _, t := range ts {
		win := t / w
		prev, cur := acc[win-1], acc[win]
		elapsed := t - win*w
		est := new(big.Rat).Mul(big.NewRat(prev, 1), big.NewRat(w-elapsed, w))
		est.Add(est, big.NewRat(cur+1, 1))
		if est.Cmp(big.NewRat(limit, 1)) <= 0 {
			acc[win]++
			n++
		}
	}
	return n
}

// TestAlgorithms replays, for each algorithm, a capture of flows at known
// constant rates and checks each flow's accepted count against the count
// computed above from the algorithm's definition.
func TestAlgorithms(t *testing.T) {
	fl := constFlows()
	var recs []rec
	for _, f := range fl {
		for _, ts := range f.times() {
			recs = append(recs, rec{ts, udpFrame(f.sport, 10)})
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].t < recs[j].t })
	capture := pcapBytes(t, layers.LinkTypeEthernet, recs)

	const rate, burst = 10, 4
	for _, tc := range []struct {
		algo   shaper.Algorithm
		window time.Duration
		expect func(ts []int64) int
	}{
		{shaper.TokenBucket, 0, func(ts []int64) int { return expectTokenBucket(ts, rate, burst) }},
		{shaper.FixedWindow, time.Second, func(ts []int64) int { return expectFixedWindow(ts, 1e9, rate) }},
		{shaper.FixedWindow, 300 * time.Millisecond, func(ts []int64) int { return expectFixedWindow(ts, 3e8, 3) }},
		{shaper.SlidingWindow, time.Second, func(ts []int64) int { return expectSlidingWindow(ts, 1e9, rate) }},
		{shaper.SlidingWindow, 2 * time.Second, func(ts []int64) int { return expectSlidingWindow(ts, 2e9, 2*rate) }},
		{shaper.SlidingWindowCounter, time.Second, func(ts []int64) int { return expectSlidingWindowCounter(ts, 1e9, rate) }},
		{shaper.SlidingWindowCounter, 700 * time.Millisecond, func(ts []int64) int { return expectSlidingWindowCounter(ts, 7e8, 7) }},
	} {
		name := fmt.Sprintf("%v/%v", tc.algo, tc.window)
		eng, err := shaper.New(shaper.Config{Algorithm: tc.algo, Rate: rate, Burst: burst, Window: int64(tc.window)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := New(eng, Options{})
		if err := r.Replay("algorithms.pcap", bytes.NewReader(capture), 0); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := map[string]uint64{}
		for _, f := range r.Flows(0) {
			got[f.Flow] = f.Accepted
		}
		for _, f := range fl {
			key := fmt.Sprintf("udp 10.0.0.1:%d > 10.0.0.2:53", f.sport)
			want := tc.expect(f.times())
			if got[key] != uint64(want) {
				t.Errorf("%s: flow at %d/s: accepted %d, want %d", name, f.rate, got[key], want)
			}
		}
	}
}

// manyFlows is a capture of n packets over nflows flows, 1 µs apart.
func manyFlows(t testing.TB, n, nflows int) []byte {
	frames := make([][]byte, nflows)
	for i := range frames {
		frames[i] = udpFrame(uint16(1024+i), 18+i%200)
		binary.BigEndian.PutUint16(frames[i][14+12+2:], uint16(i>>16)) // vary the source address beyond 65536 flows
	}
	rs := make([]rec, 0, n)
	for k := range n {
		rs = append(rs, rec{int64(1.7e18) + int64(k)*1000, frames[(k*7919)%nflows]})
	}
	return pcapBytes(t, layers.LinkTypeEthernet, rs)
}

// TestNoAllocsPerPacket: once the flow table has its flows, reading a
// record, decapsulating it, deciding it and writing every output does not
// allocate, for pcap and pcapng.
func TestNoAllocsPerPacket(t *testing.T) {
	capture := manyFlows(t, 20000, 100)
	var ng bytes.Buffer
	{
		rd, err := NewReader(bytes.NewReader(capture))
		if err != nil {
			t.Fatal(err)
		}
		w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
		if err != nil {
			t.Fatal(err)
		}
		for {
			data, ci, _, err := rd.Next()
			if err != nil {
				break
			}
			w.WritePacket(ci, data)
		}
		w.Flush()
	}
	for name, b := range map[string][]byte{"pcap": capture, "pcapng": ng.Bytes()} {
		eng, err := shaper.New(shaper.Config{Rate: 10})
		if err != nil {
			t.Fatal(err)
		}
		// pcap input with pcap outputs, pcapng input with pcapng outputs.
		ng := name == "pcapng"
		r := New(eng, Options{Verdicts: io.Discard, Accepted: io.Discard, Dropped: io.Discard, AcceptedNg: ng, DroppedNg: ng})
		n := packetAllocs(t, r, b, 1000, 18000)
		if n != 0 {
			t.Errorf("%s: %d allocations in 18000 packets, want 0", name, n)
		}
	}
}

// packetStep is a function that replays capture's next packet through r.
func packetStep(t *testing.T, r *Replayer, capture []byte) func() {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		data, ci, lt, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.packet(data, &ci, lt); err != nil {
			t.Fatal(err)
		}
	}
}

// packetAllocs replays the first warm packets of capture through r (to
// fill the flow table and the buffers), then counts every allocation over
// the next n (AllocsPerRun would round a rare one down to 0); like
// AllocsPerRun, on one P so that other goroutines' allocations do not
// count.
func packetAllocs(t *testing.T, r *Replayer, capture []byte, warm, n int) uint64 {
	t.Helper()
	step := packetStep(t, r, capture)
	for range warm {
		step()
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		step()
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// TestOutputs checks --verdicts and the pcap outputs against each other
// and against the capture: every record once, in order, with its bytes,
// link type and timestamp.
func TestOutputs(t *testing.T) {
	in := filepath.Join(testdata, "multiflow.pcap")
	var verdicts, acc, drp bytes.Buffer
	eng, err := shaper.New(shaper.Config{Rate: 10, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := New(eng, Options{Verdicts: &verdicts, Accepted: &acc, Dropped: &drp})
	if err := r.ReplayFile(in); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	s := r.Summary()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	orig, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := pcapgo.NewReader(&acc)
	if err != nil {
		t.Fatal(err)
	}
	rdp, err := pcapgo.NewReader(&drp)
	if err != nil {
		t.Fatal(err)
	}
	if ra.LinkType() != layers.LinkTypeEthernet || rdp.LinkType() != layers.LinkTypeEthernet {
		t.Errorf("output link types %v, %v; want Ethernet", ra.LinkType(), rdp.LinkType())
	}
	lines := bytes.Split(bytes.TrimSuffix(verdicts.Bytes(), []byte("\n")), []byte("\n"))
	if uint64(len(lines)) != s.Packets {
		t.Fatalf("%d verdict lines, want %d", len(lines), s.Packets)
	}
	var nacc, ndrop uint64
	for i, line := range lines {
		data, ci, err := orig.ReadPacketData()
		if err != nil {
			t.Fatal(err)
		}
		var out *pcapgo.Reader
		switch string(line) {
		case fmt.Sprintf("%d ACCEPT", i+1):
			out, nacc = ra, nacc+1
		case fmt.Sprintf("%d DROP", i+1):
			out, ndrop = rdp, ndrop+1
		default:
			t.Fatalf("verdict line %d is %q", i+1, line)
		}
		od, oci, err := out.ReadPacketData()
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if !bytes.Equal(od, data) || !oci.Timestamp.Equal(ci.Timestamp) || oci.Length != ci.Length {
			t.Fatalf("record %d: written %v %d % x, want %v %d % x", i+1, oci.Timestamp, oci.Length, od, ci.Timestamp, ci.Length, data)
		}
	}
	if nacc != s.Accepted || ndrop != s.Dropped {
		t.Errorf("verdicts: %d accepted, %d dropped; summary says %d, %d", nacc, ndrop, s.Accepted, s.Dropped)
	}
	for name, rd := range map[string]*pcapgo.Reader{"accepted": ra, "dropped": rdp} {
		if _, _, err := rd.ReadPacketData(); err != io.EOF {
			t.Errorf("%s output has more records than verdicts (%v)", name, err)
		}
	}
}

// TestOutputMixedLinkTypes: a pcap output holds one link type, so a
// capture with several is a clear error, not a corrupt file; a pcapng
// output takes them all, each record under an interface of its link type.
func TestOutputMixedLinkTypes(t *testing.T) {
	in := filepath.Join(testdata, "mixed.pcapng")
	eng, _ := shaper.New(shaper.Config{Rate: 1000})
	r := New(eng, Options{Accepted: io.Discard})
	err := r.ReplayFile(in)
	want := in + ": packet 2: writing accepted packets: link type RAW (101) differs from the file's EN10MB (1); a pcap file holds one link type (write .pcapng instead)"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}

	var acc, drp bytes.Buffer
	eng, _ = shaper.New(shaper.Config{Rate: 1, Burst: 2})
	r = New(eng, Options{Accepted: &acc, AcceptedNg: true, Dropped: &drp, DroppedNg: true})
	if err := r.ReplayFile(in); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	s := r.Summary()
	if s.Accepted == 0 || s.Dropped == 0 {
		t.Fatalf("want both verdicts in this test, got %+v", s)
	}
	orig := openCapture(t, in)
	// Merge the two outputs back by timestamp: together they must be the
	// input, record for record, with the same link types.
	readOut := func(b []byte) []record {
		return readRecords(t, testutil.Must(NewReader(bytes.NewReader(b)))(t))
	}
	out := append(readOut(acc.Bytes()), readOut(drp.Bytes())...)
	sort.Slice(out, func(i, j int) bool { return out[i].ts < out[j].ts })
	if uint64(len(out)) != s.Packets {
		t.Fatalf("outputs hold %d records, want %d", len(out), s.Packets)
	}
	recs := readRecords(t, orig)
	if len(out) != len(recs) {
		t.Fatalf("%d records written, %d read", len(out), len(recs))
	}
	for i, w := range recs {
		if out[i] != w {
			t.Errorf("record %d: written %d %v, want %d %v", i+1, out[i].ts, out[i].lt, w.ts, w.lt)
		}
	}
}

// TestConstantMemory streams a 2,000,000-record capture (about 200 MB, never
// held in memory) over 500,000 flows through an engine capped at 1,000
// flows, and checks that the heap stays small throughout: memory is bounded
// by the flow table, not by the capture.
func TestConstantMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("streams hundreds of MB through code with no goroutine: nothing for the race detector, five times as long (scripts/test.sh runs this test without -race first)")
	}
	if testing.Short() {
		t.Skip("streams 200 MB")
	}
	const n, nflows = 2_000_000, 500_000
	// The heap of this test only: not the garbage the tests before it
	// left (TestHugeLengthsBounded inflates 256 MiB).
	runtime.GC()
	eng, err := shaper.New(shaper.Config{Rate: 10, MaxFlows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var peak uint64
	r := New(eng, Options{Verdicts: io.Discard, Progress: func(Progress) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}})
	if err := r.Replay("stream.pcap", &synthCapture{n: n, flows: nflows}, 0); err != nil {
		t.Fatal(err)
	}
	s := r.Summary()
	if s.Packets != n || s.Flows != 1000 || s.Evictions == 0 {
		t.Errorf("summary %+v", s)
	}
	t.Logf("%d records, peak heap in use %d KiB, %d evictions", s.Packets, peak>>10, s.Evictions)
	if peak > 32<<20 {
		t.Errorf("peak heap in use %d MiB, want < 32 MiB", peak>>20)
	}
}

// synthCapture is an io.Reader of a pcap of n Ethernet/IPv4/UDP records
// over flows flows, made on the fly.
type synthCapture struct {
	n, flows, i int
	pending     []byte
	hdr         bool
}

func (s *synthCapture) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if !s.hdr {
			s.hdr = true
			var b bytes.Buffer
			pcapgo.NewWriterNanos(&b).WriteFileHeader(65535, layers.LinkTypeEthernet)
			s.pending = b.Bytes()
			continue
		}
		if s.i == s.n {
			return 0, io.EOF
		}
		f := udpFrame(uint16(s.i%s.flows), 40)
		binary.BigEndian.PutUint16(f[14+12+2:], uint16(s.i%s.flows>>16))
		var rh [16]byte
		ts := int64(1.7e18) + int64(s.i)*1000
		binary.LittleEndian.PutUint32(rh[0:], uint32(ts/1e9))
		binary.LittleEndian.PutUint32(rh[4:], uint32(ts%1e9))
		binary.LittleEndian.PutUint32(rh[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rh[12:], uint32(len(f)))
		s.pending = append(rh[:], f...)
		s.i++
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// TestStream: several files are one stream: the index and the engine
// carry over, and the counts add up.
func TestStream(t *testing.T) {
	files := []string{"multiflow.pcap", "sll.pcap", "mixed.pcapng.gz"}
	var verdicts bytes.Buffer
	eng, _ := shaper.New(shaper.Config{Rate: 10})
	r := New(eng, Options{Verdicts: &verdicts})
	for _, f := range files {
		if err := r.ReplayFile(filepath.Join(testdata, f)); err != nil {
			t.Fatal(err)
		}
	}
	r.Flush()
	s := r.Summary()
	if s.Packets != 555+7+16 {
		t.Errorf("packets %d, want %d", s.Packets, 555+7+16)
	}
	if !bytes.HasSuffix(verdicts.Bytes(), []byte("\n578 ACCEPT\n")) {
		t.Errorf("verdicts end with %q", verdicts.Bytes()[verdicts.Len()-20:])
	}
}

// BenchmarkReplay replays a 1,000,000-packet, 10,000-flow Ethernet capture
// (small UDP packets) from a file in the page cache, with every output
// off, and reports packets/s. The "read" sub-benchmark only reads the
// records (pcapgo), as a baseline measured in the same run;
// "replay+timeline" adds what --report collects per packet.
func BenchmarkReplay(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.pcap")
	if err := os.WriteFile(path, manyFlows(b, 1_000_000, 10_000), 0o644); err != nil {
		b.Fatal(err)
	}
	const n = 1_000_000
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, _ := os.Open(path)
			got, err := readAll(f)
			f.Close()
			if err != nil || got != n {
				b.Fatal(got, err)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "packets/s")
	})
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"replay", Options{}},
		// What --report adds: the per-rule counts over capture time.
		{"replay+timeline", Options{Timeline: true}},
		// --verdicts, --write-accepted and --write-dropped, to io.Discard.
		{"replay+outputs", Options{Verdicts: io.Discard, Accepted: io.Discard, Dropped: io.Discard}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				eng, _ := shaper.New(shaper.Config{Rate: 10})
				r := New(eng, c.o)
				if err := r.ReplayFile(path); err != nil {
					b.Fatal(err)
				}
				if err := r.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "packets/s")
		})
	}
}
