package global

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// udpPacket is an IPv4 UDP packet of flow i (source 10.x.y.z:i), to one
// destination.
func udpPacket(i int) []byte {
	b := make([]byte, 64)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	copy(b[16:], []byte{10, 255, 0, 1})
	binary.BigEndian.PutUint16(b[20:], uint16(i))
	binary.BigEndian.PutUint16(b[22:], 9000)
	binary.BigEndian.PutUint16(b[24:], uint16(len(b)-20))
	return b
}

// BenchmarkDecideGlobalRedis measures Engine.Decide for a global rule whose
// leases come from a real redis-server through the refresher, beside the
// same rule run locally, in one run (a rate far above the traffic: the
// leases hold plenty, the engine only spends them).
//
//	go test -run '^$' -bench DecideGlobalRedis -benchmem ./global
func BenchmarkDecideGlobalRedis(b *testing.B) {
	s := testutil.StartRedis(b)
	c, err := Open(Config{Addrs: []string{s.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{1, 10_000} {
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = udpPacket(i)
		}
		lim := shaper.Config{Rate: 1e9, Burst: 1e9, MaxFlows: n}
		run := func(b *testing.B, e *shaper.Engine, warm func()) {
			now := c.clock()
			for _, p := range pkts {
				e.Decide(p, now)
			}
			warm()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				e.Decide(pkts[i], now)
				if i++; i == n {
					i = 0
					now = c.clock()
				}
			}
		}
		b.Run(fmt.Sprintf("local/flows=%d", n), func(b *testing.B) {
			e, err := shaper.New(lim)
			if err != nil {
				b.Fatal(err)
			}
			run(b, e, func() {})
		})
		b.Run(fmt.Sprintf("global/flows=%d", n), func(b *testing.B) {
			g := lim
			g.Global, g.GlobalSlack = true, 0.5
			r, err := c.NewRule(RuleConfig{Name: fmt.Sprintf("bench%d", n), Limit: g})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			e, err := shaper.NewPolicy(shaper.Policy{Rules: []shaper.Rule{{Name: "g", Limit: g, Global: r}}})
			if err != nil {
				b.Fatal(err)
			}
			var errs0 uint64
			run(b, e, func() {
				// The first grants of every key (a first batch that
				// times out on a busy machine is asked again).
				deadline := time.Now().Add(10 * time.Second)
				for r.Stats().Asks < uint64(n) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
				errs0 = r.Stats().Errors
			})
			b.StopTimer()
			if st := r.Stats(); st.Errors != errs0 || st.Fallback {
				b.Errorf("store errors while measuring: %+v", st)
			}
		})
	}
}

// BenchmarkRedisLoad measures the store's load: one host with K active
// keys of a global rule (100 packets/s per key, burst 100, global-slack
// 0.1), each offered 5 packets/s (under the limit: each key asks about
// twice per refresh interval, the lease's target hold being half of it), for 5 s after 2 s of warm-up. It reports the commands per
// second the store received from the host (one per ask), those it ran with
// the scripts' own calls, the accepted packets per second and the commands
// per accepted packet. Run once (-benchtime 1x):
//
//	go test -run '^$' -bench RedisLoad -benchtime 1x ./global
func BenchmarkRedisLoad(b *testing.B) {
	for _, keys := range []int{10, 1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := testutil.StartRedis(b)
			c, err := Open(Config{Addrs: []string{s.Addr()}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			r, err := c.NewRule(RuleConfig{Name: "load", Limit: shaper.Config{Rate: 100, Burst: 100, Global: true, GlobalSlack: 0.1, MaxFlows: keys}})
			if err != nil {
				b.Fatal(err)
			}
			ks := make([]flows.Key, keys)
			ls := make([]*shaper.Lease, keys)
			for i := range ks {
				ks[i] = flows.Key{Family: 4, Mode: flows.Src, Src: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}}
			}
			const pps, dur, warm = 5.0, 5 * time.Second, 2 * time.Second
			var accepted, offered atomic.Int64
			var measure atomic.Bool
			drive := func(ctx context.Context) {
				// Every 10 ms a slice of the keys sends a packet each:
				// each key 5 times a second, spread over the second.
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				const slices = 100 / pps * 1 // ticks per packet of a key: 20
				for n := 0; ; n++ {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					now := c.clock()
					for i := n % int(slices); i < keys; i += int(slices) {
						if ls[i] == nil || ls[i].Retired() {
							ls[i] = r.Lease(&ks[i])
						}
						ok := ls[i] != nil && ls[i].Take(now, 1)
						if measure.Load() {
							offered.Add(1)
							if ok {
								accepted.Add(1)
							}
						}
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), warm+dur)
			defer cancel()
			done := make(chan struct{})
			go func() { drive(ctx); close(done) }()
			time.Sleep(warm)
			cmd0, all0, cpu0 := clientCommands(b, s), s.Info("total_commands_processed"), cpuSeconds(b, s)
			measure.Store(true)
			t0 := time.Now()
			time.Sleep(dur)
			measure.Store(false)
			secs := time.Since(t0).Seconds()
			cmds, all, cpu := clientCommands(b, s)-cmd0, s.Info("total_commands_processed")-all0, cpuSeconds(b, s)-cpu0
			<-done
			st := r.Stats()
			b.ReportMetric(float64(cmds)/secs, "cmds/s")
			b.ReportMetric(float64(all)/secs, "store-cmds/s")
			b.ReportMetric(float64(accepted.Load())/secs, "accepted/s")
			b.ReportMetric(float64(offered.Load())/secs, "offered/s")
			b.ReportMetric(float64(cmds)/float64(max(accepted.Load(), 1)), "cmds/accepted")
			b.ReportMetric(100*cpu/secs, "store-cpu%")
			b.ReportMetric(float64(st.Errors), "errors")
			if st.Fallback {
				b.ReportMetric(1, "fallback")
			}
		})
	}
}
