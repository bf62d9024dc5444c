package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// The replay-level attack of issue 12 ("Under attack"): a random-source UDP
// flood that creates a new flow with every packet, beside a few legitimate
// flows, against a flow table far smaller than the flood.
const (
	attackFloodPackets = 1_000_000 // one per distinct source address
	attackFloodPPS     = 90_000    // packets/s of capture time
	attackLegitFlows   = 4
	attackLegitPPS     = 100
	attackRate         = 50 // --pps
	attackMaxFlows     = 10_000
	attackMaxRSS       = 300 << 20 // bytes
)

// attackLegit is one legitimate flow of the attack capture: where its
// packets are (record indexes, from 1) and when.
type attackLegit struct {
	name  string
	index []int
	ns    []int64
}

// writeAttackCapture writes an attack capture to dir/name and returns its
// path, record count and legitimate flows: attackFloodPackets packets at
// attackFloodPPS from random IPv4 sources (random source ports), each
// source distinct when sources is attackFloodPackets, else packet i from
// source i % sources; interleaved by time with attackLegitFlows flows of
// attackLegitPPS (each packet jittered by up to ±1 ms) for as long as the
// flood lasts; all UDP to 198.51.100.1:9000. Seeded: the same bytes every
// time.
func writeAttackCapture(t *testing.T, dir, name string, sources int) (string, int, []attackLegit) {
	t.Helper()
	path := filepath.Join(dir, name)
	c, err := newCapWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	floodGap := int64(time.Second) / attackFloodPPS
	end := t0 + attackFloodPackets*floodGap
	dst := [4]byte{198, 51, 100, 1}
	rng := rand.New(rand.NewPCG(12, 12))

	legit := make([]attackLegit, attackLegitFlows)
	next := make([]int64, attackLegitFlows) // time of each flow's next packet
	legitGap := int64(time.Second) / attackLegitPPS
	// Packet m of legitimate flow j: the flows evenly staggered, each
	// packet ±1 ms off its slot.
	legitTime := func(j, m int) int64 {
		jitter := rng.Int64N(2*int64(time.Millisecond)+1) - int64(time.Millisecond)
		return t0 + int64(m)*legitGap + int64(j)*legitGap/attackLegitFlows + int64(time.Millisecond) + jitter
	}
	for j := range legit {
		legit[j].name = fmt.Sprintf("udp 192.0.2.%d:%d > 198.51.100.1:9000", j+1, 40000+j)
		next[j] = legitTime(j, 0)
	}
	// Distinct sources: i -> a bijection of uint32 (multiplications by odd
	// constants and xorshifts are invertible), so no two flood packets
	// share a source.
	src := func(i uint32) [4]byte {
		x := i*0x9e3779b1 + 0x7f4a7c15
		x ^= x >> 15
		x *= 0x2c1b3c6d
		x ^= x >> 12
		return [4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)}
	}
	for i := 0; i < attackFloodPackets; i++ {
		ft := t0 + int64(i)*floodGap
		// Legitimate packets due before this flood packet go first.
		for {
			j, jt := -1, int64(math.MaxInt64)
			for k, nt := range next {
				if nt < jt {
					j, jt = k, nt
				}
			}
			if jt > ft || jt >= end {
				break
			}
			if err := c.udp(jt, [4]byte{192, 0, 2, byte(j + 1)}, dst, uint16(40000+j), 9000); err != nil {
				t.Fatal(err)
			}
			legit[j].index = append(legit[j].index, c.n)
			legit[j].ns = append(legit[j].ns, jt)
			next[j] = legitTime(j, len(legit[j].ns))
		}
		s := src(uint32(i % sources))
		sport := uint16(1024 + (i%sources*7919)%64512) // a source keeps its port
		if sources == attackFloodPackets {
			sport = uint16(1024 + rng.IntN(64512))
		}
		if s[0] == 192 && s[1] == 0 && s[2] == 2 {
			sport = 1 // never a legitimate flow's 5-tuple
		}
		if err := c.udp(ft, s, dst, sport, 9000); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	return path, c.n, legit
}

// TestReplayUnderAttack replays the random-source flood of issue 12 (a
// million packets, each from a new source, at 90 000 packets/s) beside four
// legitimate flows of 100 packets/s with --max-flows 10000 --pps 50, with
// burst 5 and 50: each legitimate flow must get what an exact token bucket
// over its own packets gives (±5 %), however many flood flows pass through
// the table (evictions > 0), with peak RSS under 300 MiB. A table that
// evicts the legitimate flows hands each of them a fresh burst every time
// it comes back: the LRU table of before the fix (a flow moves to the front
// at most once per 0.94 s, while the flood cycles the table every 0.11 s)
// let each legitimate flow through 933 of 1111 packets instead of 559
// (+67 %) with burst 5, and all 1111 (+84 %) with burst 50.
func TestReplayUnderAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and replays a million packets")
	}
	bin := buildShaper(t)
	dir := t.TempDir()
	t0 := time.Now()
	floodPath, records, legit := writeAttackCapture(t, dir, "attack.pcap", attackFloodPackets)
	t.Logf("capture: %d records (%d flood, %d per legitimate flow) written in %v",
		records, attackFloodPackets, len(legit[0].ns), time.Since(t0).Round(time.Millisecond))
	// The control: the same traffic from fewer sources than the table
	// holds, so that nothing is evicted, must give each legitimate flow
	// exactly the exact bucket's count, or the comparison means nothing.
	controlPath, controlRecords, controlLegit := writeAttackCapture(t, dir, "control.pcap", attackMaxFlows-1000)
	cases := []struct {
		name    string
		burst   int64
		path    string
		records int
		legit   []attackLegit
		evict   bool // the flood must evict
	}{
		{"control-9000-sources", 5, controlPath, controlRecords, controlLegit, false},
		{"burst5", 5, floodPath, records, legit, true},
		{"burst50", 50, floodPath, records, legit, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vf := filepath.Join(dir, "verdicts")
			out, rss := runPeakRSS(t, bin, "replay", "--json", "--verdicts", vf, "--max-flows", strconv.Itoa(attackMaxFlows),
				"--pps", strconv.Itoa(attackRate), "--burst", strconv.FormatInt(tc.burst, 10), tc.path)
			var rep jsonReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("--json output: %v", err)
			}
			t.Logf("--burst %d: packets %d, accepted %d, flows_seen %d, evictions %d, peak RSS %s",
				tc.burst, rep.Packets, rep.Accepted, rep.FlowsSeen, rep.Evictions, mib(rss))
			if rep.Packets != uint64(tc.records) {
				t.Fatalf("replayed %d packets, the capture has %d", rep.Packets, tc.records)
			}
			if tc.evict && rep.Evictions == 0 {
				t.Errorf("no evictions: the flood (%d flows) did not fill a table of %d", attackFloodPackets, attackMaxFlows)
			}
			if !tc.evict && rep.Evictions != 0 {
				t.Errorf("%d evictions: the control's flows fit in the table", rep.Evictions)
			}
			if rss > attackMaxRSS {
				t.Errorf("peak RSS %s, want <= %s", mib(rss), mib(attackMaxRSS))
			}
			acc := readVerdicts(t, vf, tc.records)
			for _, l := range tc.legit {
				got := 0
				for _, i := range l.index {
					if acc[i] {
						got++
					}
				}
				want := testutil.ExactTokenBucket(l.ns, tc.burst, attackRate)
				dev := float64(got-want) / float64(want)
				msg := fmt.Sprintf("%s: %d packets, accepted %d, an exact token bucket accepts %d (%+.1f %%)", l.name, len(l.ns), got, want, 100*dev)
				if math.Abs(dev) > 0.05 {
					t.Errorf("%s; want within ±5 %%", msg)
				} else {
					t.Log(msg)
				}
			}
		})
	}
}
