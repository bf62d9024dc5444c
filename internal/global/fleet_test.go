package global

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// The fleet simulation (issue 33): N hosts, each a real Client with its own
// connections, against a 3-master Redis Cluster on loopback (startCluster).
// One hot key above its limit (offered twice its rate, spread over the
// hosts), and 1 000 cooler keys of another rule (2 packets/s each, each
// key on one host) beside it. Packets are simulated: drivers take them
// from the leases as the engine does, every 5 ms.
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 20m ./internal/global
//
// FLEET_HOSTS=10,100 picks the fleet sizes (default 10,100,1000);
// FLEET_LEASES=rate gives the hosts rate leases (rate.go). Reported
// per size: hot-req/s (asks for the hot key, all hosts), their ratio to
// hosts ÷ interval (req/bar, the bar is 1.2), hot-cpu/s (used_cpu of the
// master holding the hot key per second), cpu/s (all three masters),
// accepted/ideal (the hot key's accepted packets against one ideal bucket
// over the same time), and with demand moved from 10 % of the hosts to
// another 10 % halfway: recover-intervals, how many refresh intervals
// until a whole interval accepted at least 95 % of the rate, and
// shift-accepted/ideal.
const (
	fleetRate, fleetBurst = 2000.0, 200.0
	fleetCool             = 1000
	fleetCoolPPS          = 2.0
	fleetTick             = 5 * time.Millisecond
)

func BenchmarkFleet(b *testing.B) {
	sizes := []int{10, 100, 1000}
	if s := os.Getenv("FLEET_HOSTS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("FLEET_HOSTS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	nodes := startCluster(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			for _, node := range nodes {
				node.Cli("flushall")
			}
			fleetRun(b, nodes, n)
		})
	}
}

type fleetHost struct {
	c         *Client
	hot, cool *Rule
	hotL      *shaper.Lease
	coolL     []*shaper.Lease
	coolK     []flows.Key
	debt      float64 // hot packets due
	coolDebt  float64
	next      int // the cool key of the next packet
}

func fleetRun(b *testing.B, nodes []*testutil.Redis, n int) {
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	hotKey := key(1)
	hosts := make([]*fleetHost, n)
	for i := range hosts {
		c, err := Open(Config{Addrs: addrs, Cluster: true, KeyPrefix: "f:", Timeout: time.Second, // (a shared machine: 1 000 clients dial at once)
			rateLeases: os.Getenv("FLEET_LEASES") == "rate"})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		lim := shaper.Config{Rate: fleetRate, Burst: fleetBurst, Global: true}
		hot, err := c.NewRule(RuleConfig{Name: "hot", Limit: lim})
		if err != nil {
			b.Fatal(err)
		}
		cool, err := c.NewRule(RuleConfig{Name: "cool", Limit: lim})
		if err != nil {
			b.Fatal(err)
		}
		h := &fleetHost{c: c, hot: hot, cool: cool}
		for k := i; k < fleetCool; k += n {
			h.coolK = append(h.coolK, key(1000+k))
		}
		h.coolL = make([]*shaper.Lease, len(h.coolK))
		hosts[i] = h
	}
	// Warm up: every host connected to the cluster (its slots known) and
	// answered once, on a key of its own, before the run is timed.
	for i, h := range hosts {
		k := key(900_000 + i)
		h.cool.Lease(&k).Take(h.c.clock(), 1)
	}
	if !testutil.WaitFor(b, 60*time.Second, func() bool {
		for _, h := range hosts {
			if st := h.cool.Stats(); st.Granted == 0 && st.Asks <= st.Errors { // (a rate lease's grant is its rate: Granted counts its refills)
				return false
			}
		}
		return true
	}) {
		b.Fatal("the hosts get no grants")
	}
	errs0 := uint64(0)
	for _, h := range hosts {
		errs0 += h.cool.Stats().Errors
	}
	interval := time.Duration(hosts[0].c.interval).Seconds()
	hotNode := nodes[0]
	slot, _ := strconv.Atoi(nodes[0].Cli("cluster", "keyslot", hosts[0].hot.storeKey(&hotKey)))
	for _, s := range nodes {
		if ownsSlot(s, slot) {
			hotNode = s
		}
	}

	// drive offers hot packets at pps[i] to host i (and the cool keys at
	// their rate) until ctx is done; accepted[bin] counts the hot key's
	// accepted packets per 100 ms bin from start.
	type result struct {
		accepted []int64
		start    time.Time
	}
	drive := func(ctx context.Context, pps func(i int, since time.Duration) float64, d time.Duration) result {
		bins := int(d/(100*time.Millisecond)) + 2
		res := result{accepted: make([]int64, bins), start: time.Now()}
		var mu sync.Mutex
		var wg sync.WaitGroup
		const drivers = 4
		for w := range drivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]int64, bins)
				tick := time.NewTicker(fleetTick)
				defer tick.Stop()
				last := time.Now()
				for {
					select {
					case <-ctx.Done():
						mu.Lock()
						for i, v := range local {
							res.accepted[i] += v
						}
						mu.Unlock()
						return
					case now := <-tick.C:
						dt := now.Sub(last).Seconds()
						last = now
						since := now.Sub(res.start)
						bin := min(int(since/(100*time.Millisecond)), bins-1)
						for i := w; i < n; i += drivers {
							h := hosts[i]
							t := h.c.clock()
							h.debt += pps(i, since) * dt
							for ; h.debt >= 1; h.debt-- {
								if h.hotL == nil || h.hotL.Retired() {
									h.hotL = h.hot.Lease(&hotKey)
								}
								if h.hotL != nil && h.hotL.Take(t, 1) {
									local[bin]++
								} else if fb := h.hot.Local().Fallback(); fb != nil {
									h.hotL.Demand(1) // (counted as refused)
								}
							}
							h.coolDebt += fleetCoolPPS * float64(len(h.coolK)) * dt
							for ; h.coolDebt >= 1 && len(h.coolK) > 0; h.coolDebt-- {
								h.next = (h.next + 1) % len(h.coolK)
								j := h.next
								if h.coolL[j] == nil || h.coolL[j].Retired() {
									h.coolL[j] = h.cool.Lease(&h.coolK[j])
								}
								if h.coolL[j] != nil {
									h.coolL[j].Take(t, 1)
								}
							}
						}
					}
				}
			}()
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		<-ctx.Done()
		wg.Wait()
		return res
	}
	hotAsks := func() (s uint64) {
		for _, h := range hosts {
			s += h.hot.Stats().Asks
		}
		return s
	}
	errs := func() (s uint64) {
		for _, h := range hosts {
			s += h.hot.Stats().Errors + h.cool.Stats().Errors
		}
		return s
	}
	cpuAll := func() (s float64) {
		for _, node := range nodes {
			s += cpuSeconds(b, node)
		}
		return s
	}

	// Steady: every host offers 2 × rate / n; measured over the last 4 s
	// of 6.
	even := func(int, time.Duration) float64 { return 2 * fleetRate / float64(n) }
	const warm, steady = 2 * time.Second, 4 * time.Second
	var a0, a1 uint64
	var c0, c1, h0, h1 float64
	var t0, t1 time.Time
	measured := make(chan struct{})
	go func() {
		defer close(measured)
		time.Sleep(warm)
		a0, c0, h0, t0 = hotAsks(), cpuAll(), cpuSeconds(b, hotNode), time.Now()
		time.Sleep(steady - 100*time.Millisecond)
		a1, c1, h1, t1 = hotAsks(), cpuAll(), cpuSeconds(b, hotNode), time.Now()
	}()
	res := drive(context.Background(), even, warm+steady)
	<-measured
	secs := t1.Sub(t0).Seconds()
	var total, inSteady int64
	for i, v := range res.accepted {
		total += v
		if at := time.Duration(i) * 100 * time.Millisecond; at >= warm && at < warm+steady {
			inSteady += v
		}
	}
	ideal := fleetBurst + fleetRate*(warm+steady).Seconds()
	reqs := float64(a1-a0) / secs
	bar := float64(n) / interval
	b.ReportMetric(reqs, "hot-req/s")
	b.ReportMetric(reqs/bar, "req/bar")
	b.ReportMetric((h1-h0)/secs, "hot-cpu/s")
	b.ReportMetric((c1-c0)/secs, "cpu/s")
	b.ReportMetric(float64(total)/ideal, "accepted/ideal")
	b.ReportMetric(float64(inSteady)/(fleetRate*steady.Seconds()), "steady/rate")

	// Moved: 10 % of the hosts offer it all, then another 10 % from
	// halfway.
	for _, h := range hosts {
		h.debt = 0
	}
	tenth := max(n/10, 1)
	const half = 4 * time.Second
	moved := func(i int, since time.Duration) float64 {
		from := 0
		if since >= half {
			from = tenth
		}
		if i >= from && i < from+tenth {
			return 2 * fleetRate / float64(tenth)
		}
		return 0
	}
	time.Sleep(time.Duration(2*hosts[0].c.life) + time.Second) // the hot key idle: leases retired
	res = drive(context.Background(), moved, 2*half)
	// Recovery: the first whole interval from the move that accepted at
	// least 95 % of rate × interval, in intervals.
	per := int(math.Round(interval / 0.1))
	first := int(half / (100 * time.Millisecond))
	recover := math.Inf(1)
	for s := first; s+per <= len(res.accepted)-2; s++ {
		var sum int64
		for _, v := range res.accepted[s : s+per] {
			sum += v
		}
		if float64(sum) >= 0.95*fleetRate*interval {
			recover = float64(s+per-first) / float64(per)
			break
		}
	}
	total = 0
	for _, v := range res.accepted {
		total += v
	}
	b.ReportMetric(recover, "recover-intervals")
	b.ReportMetric(float64(total)/(fleetBurst+fleetRate*(2*half).Seconds()), "shift-accepted/ideal")
	b.ReportMetric(float64(errs()-errs0), "errors")
}

// ownsSlot reports whether node s serves slot.
func ownsSlot(s *testutil.Redis, slot int) bool {
	for _, l := range strings.Split(s.Cli("cluster", "nodes"), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			z := a
			if ok {
				z, _ = strconv.Atoi(hi)
			}
			if slot >= a && slot <= z {
				return true
			}
		}
	}
	return false
}
