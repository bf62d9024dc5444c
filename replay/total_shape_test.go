package replay

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/packetshaper/packetshaper/shaper"
)

// TestReplayShapingTotal: replay runs a shaping rule with a fairly shared
// total on the capture's clock with the engine live runs, so every verdict
// (accepted now, held for the same nanoseconds, dropped over the max
// delay) is the one live gives the same packets at the same times.
func TestReplayShapingTotal(t *testing.T) {
	for _, keys := range []int{1, 8, 100, 1000} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) { replayShapingTotal(t, keys) })
	}
}

// replayShapingTotal is TestReplayShapingTotal over a capture of keys
// keys.
func replayShapingTotal(t *testing.T, keys int) {
	rng := rand.New(rand.NewPCG(32, uint64(keys)))
	const n = 20_000
	recs := make([]rec, n)
	now := int64(1.75e18)
	// 2 000 packets/s offered, against 100/s per key and a
	// total of 400/s: the keys held by their own limit, the
	// fair share or the total, and some over the max delay.
	for i := range recs {
		now += rng.Int64N(1e9 / 1000)
		recs[i] = rec{now, udpFrame(uint16(1024+rng.IntN(keys)), 10+rng.IntN(100))}
	}
	p := shaper.Policy{
		Rules:  []shaper.Rule{{Name: "per-key", Limit: shaper.Config{Rate: 100, Burst: 4, Shape: true, MaxDelay: 100e6 /* 100 ms */}, Total: "all"}},
		Totals: []shaper.Total{{Name: "all", Limit: shaper.TotalConfig{Rate: 400, Burst: 8}}},
	}
	eng, err := shaper.NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	r, verdicts := replayVerdicts(t, eng, "total-shape.pcap", recs)
	live, err := shaper.NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	var d shaper.Decision
	sc := bufio.NewScanner(verdicts)
	delayed, dropped := 0, 0
	for i := range recs {
		live.DecidePacket(recs[i].data[14:], nil, recs[i].t, &d)
		want := fmt.Sprint(i+1, " ACCEPT")
		switch {
		case d.Verdict == shaper.Drop:
			want = fmt.Sprint(i+1, " DROP")
			dropped++
		case d.Depart != 0:
			want += fmt.Sprint(" +", d.Depart-recs[i].t)
			delayed++
		}
		if !sc.Scan() {
			t.Fatalf("%d verdicts for %d records", i, n)
		}
		if sc.Text() != want {
			t.Fatalf("verdict %q, live %q", sc.Text(), want)
		}
	}
	t.Logf("%d keys: %d verdicts agree, %d held, %d dropped", keys, n, delayed, dropped)
	if delayed == 0 || dropped == 0 {
		t.Errorf("%d held, %d dropped: the capture should exercise both", delayed, dropped)
	}
	if ts := r.Totals(); len(ts) != 1 || ts[0].Packets != n || ts[0].Accepted != live.TotalStats(0).Accepted {
		t.Errorf("replay's totals %+v, live's %+v", ts, live.TotalStats(0))
	}
}
