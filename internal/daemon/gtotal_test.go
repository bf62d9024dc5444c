package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestGlobalTotalRedis: two hosts (two globals, each its own client and
// host id, each its own engine) run a policy whose total is global against
// one real redis-server: the total is one key in the store
// (packetshaper:{total/fleet|}), both hosts get leases of it, and together
// they accept at most the fleet's burst + rate × T + what the hosts may
// hold (rate × the refresh interval, × 1.5 while the second host
// arrives) + a packet of credit each, though
// each host's keys alone could pass more than the cap: the per-key limits
// stay local. A reload that keeps the total keeps its leases.
func TestGlobalTotalRedis(t *testing.T) {
	srv := testutil.StartRedis(t)
	const (
		rate, burst = 1000.0, 100.0
		interval    = 0.1 // s: refresh-interval
		keys        = 3
	)
	text := fmt.Sprintf("[redis]\naddrs = [%q]\nrefresh-interval = \"100ms\"\n[[total]]\nname = \"fleet\"\npps = %g\nburst = %g\nscope = \"global\"\n", srv.Addr(), rate, burst) +
		rule("per-src", "", `key = "src"`, "pps = 1000", "burst = 10", `total = "fleet"`)
	var hosts [2]*shaper.Engine
	var gls [2]*globals
	for h := range hosts {
		gls[h] = newGlobals(slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer gls[h].close()
		c := compile(t, text)
		p, done, err := gls[h].prepare(c.Policy(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		if p.Totals[0].Global == nil || p.Rules[0].Global != nil {
			t.Fatalf("host %d: the total's source %v, the rule's %v: want the total global, the rule local", h, p.Totals[0].Global, p.Rules[0].Global)
		}
		if hosts[h], err = shaper.NewPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	pkts := make([][]byte, keys)
	for k := range pkts {
		pkts[k] = udpFrom(k, 1)
	}
	// Each host offers its 3 keys a packet each per millisecond or so:
	// up to 3 000/s passes its keys' limits, three times the cap.
	var perKey [2][keys]int
	start := time.Now().UnixNano()
	end := start
	for i := 0; i < 2000; i++ {
		now := time.Now().UnixNano()
		for h, e := range hosts {
			for k, p := range pkts {
				if e.Decide(p, now) == shaper.Accept {
					perKey[h][k]++
				}
			}
		}
		end = now
		time.Sleep(time.Millisecond)
	}
	T := float64(end-start) / 1e9
	var fleet uint64
	for h, e := range hosts {
		fleet += e.TotalStats(0).Accepted
		rs, _, _ := gls[h].stats()
		st := rs[TotalStoreName("fleet")]
		t.Logf("host %d: total %+v, keys %v, store %+v", h, e.TotalStats(0), perKey[h], st)
		if st.Granted == 0 || st.Fallback {
			t.Errorf("host %d: the total got no leases from the store: %+v", h, st)
		}
		for k, n := range perKey[h] {
			if float64(n) > 1000*T+10 {
				t.Errorf("host %d key %d: %d accepted over %.2f s, above its local 1000/s + 10", h, k, n, T)
			}
		}
	}
	// The hosts may hold S = rate × the interval, S × (1 + 1/2) while
	// the second host arrives (docs/global-limits.md, the bound).
	bound := burst + rate*T + 1.5*rate*interval + 2
	t.Logf("fleet accepted %d over %.2f s; bound %.0f; each host's keys could pass %.0f", fleet, T, bound, float64(keys)*1000*T)
	if float64(fleet) > bound {
		t.Errorf("the fleet accepted %d over %.2f s, above burst + rate × T + the hosts' leases = %.0f", fleet, T, bound)
	}
	if keysOut := srv.Cli("keys", "*"); !strings.Contains(keysOut, "packetshaper:{total/fleet|}") {
		t.Errorf("the store's keys %q: want the total's packetshaper:{total/fleet|}", keysOut)
	}
	// A reload keeping the total keeps its leases (the same source).
	c := compile(t, text)
	before := gls[0].byName[TotalStoreName("fleet")]
	p, done, err := gls[0].prepare(c.Policy(), c)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if p.Totals[0].Global != shaper.Global(before) {
		t.Error("a reload that keeps the total gave it new leases")
	}
}
