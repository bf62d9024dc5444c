//go:build linux

package fastpath

import (
	"math"
	"net"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestRateE2E: real UDP flows between two namespaces, sent at about twice
// their limit for a second, through the program attached at tcx ingress on
// the clock. The ideal is what shaper's token bucket accepts of the same
// packets at the times they were sent (recorded per packet, so a loaded
// machine that sends late changes the ideal, not the verdict); each flow's
// arrivals are within ±5 % of it.
func TestRateE2E(t *testing.T) {
	testutil.NeedRoot(t, "creates network namespaces and attaches an eBPF program")
	testutil.NeedTools(t, "ip")
	const (
		rate, burst = 100.0, 5.0
		nflows      = 4
		gap         = 5 * time.Millisecond // 200 packets/s per flow
		span        = time.Second
	)
	f := &policy.File{Rules: []policy.Rule{
		{Name: "per-flow", PPS: ptr(rate), Burst: ptr(burst), Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9100-9199"}}},
	}}
	p := loadAt(t, f, 0)
	nsA, nsB := vethPair(t)
	recv := make([]*net.UDPConn, nflows)
	err := doIfc(nsB, "vfb", func(ifc *net.Interface) (err error) {
		l, err := p.Attach(ifc.Index)
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		for i := range recv {
			if recv[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9100 + i}); err != nil {
				return err
			}
			recv[i].SetReadBuffer(1 << 20)
			t.Cleanup(func() { recv[i].Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	send := make([]*net.UDPConn, nflows)
	if err := testutil.Do(nsA, func() error {
		for i := range send {
			if send[i], err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9100 + i}); err != nil {
				return err
			}
			t.Cleanup(func() { send[i].Close() })
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Ideal: shaper's limiter over the send times, one state per flow.
	lim, err := shaper.NewLimiter(shaper.LimiterConfig{Algorithm: shaper.TokenBucket, Rate: rate, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	states := make([]shaper.State, nflows)
	ideal := make([]int, nflows)
	sent := 0
	start := time.Now()
	for round := 0; time.Since(start) < span && round < 1000; round++ {
		for i := range send {
			at := time.Now().UnixNano()
			if round == 0 {
				lim.Reset(&states[i], at)
			}
			if _, err := send[i].Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			sent++
			if lim.Allow(&states[i], at, 1) {
				ideal[i]++
			}
		}
		time.Sleep(gap) // pacing of the traffic, not a wait for a result
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		c, err := p.RuleCounters(0)
		return err == nil && c.Packets >= uint64(sent)
	}, "the program decided fewer than the %d packets sent", sent)
	c, _ := p.RuleCounters(0)
	got := make([]int, nflows)
	buf := make([]byte, 64)
	for i := range recv {
		for {
			recv[i].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, _, err := recv[i].ReadFromUDP(buf); err != nil {
				break
			}
			got[i]++
		}
	}
	t.Logf("%d sent in %v; program: %d accepted, %d dropped; arrived per flow %v, ideal %v", sent, time.Since(start).Round(time.Millisecond), c.Accepted, c.Dropped, got, ideal)
	total := 0
	for i := range got {
		total += got[i]
		if math.Abs(float64(got[i]-ideal[i])) > math.Max(0.05*float64(ideal[i]), 1) {
			t.Errorf("flow %d: %d arrived, ideal %d (±5 %%)", i, got[i], ideal[i])
		}
	}
	if uint64(total) != c.Accepted {
		t.Errorf("%d arrived, the program accepted %d", total, c.Accepted)
	}
}
