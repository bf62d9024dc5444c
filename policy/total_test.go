package policy

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/shaper"
)

// totalPolicy is issue 32's two examples: each guest host 5 Mbit/s and the
// guest network 20 Mbit/s in all; each API client 100 requests/s and the
// service 2 000/s, charged by two rules (v4 and v6 clients).
const totalPolicy = `
[[total]]
name = "guests"
bitrate = "20mbit"

[[total]]
name = "api"
pps = 2000
burst = 200
algo = "fixed-window"
window = "100ms"

[[rule]]
name = "guest-hosts"
match = { src = ["192.168.50.0/24"] }
key = "src"
bitrate = "5mbit"
total = "guests"

[[rule]]
name = "api-v4"
match = { family = "ipv4", proto = ["tcp"], dport = [443] }
key = "src"
pps = 100
total = "api"

[[rule]]
name = "api-v6"
match = { family = "ipv6", proto = ["tcp"], dport = [443] }
key = "src"
src-prefix6 = 64
pps = 100
mode = "shadow"
total = "api"
`

// TestTotalCompile: the [[total]] tables become the engine's totals, the
// rules name theirs, and Format writes a file that compiles the same.
func TestTotalCompile(t *testing.T) {
	c := mustCompile(t, totalPolicy, Options{})
	p := c.Policy()
	want := []shaper.Total{
		{Name: "guests", Limit: shaper.TotalConfig{Rate: 20e6 / 8, Bytes: true}},
		{Name: "api", Limit: shaper.TotalConfig{Algorithm: shaper.FixedWindow, Rate: 2000, Burst: 200, Window: 100e6}},
	}
	if len(p.Totals) != 2 || p.Totals[0] != want[0] || p.Totals[1] != want[1] {
		t.Errorf("totals %+v, want %+v", p.Totals, want)
	}
	for i, name := range []string{"guests", "api", "api"} {
		if p.Rules[i].Total != name {
			t.Errorf("rule %s charges %q, want %q", p.Rules[i].Name, p.Rules[i].Total, name)
		}
	}
	if _, err := shaper.NewPolicy(p); err != nil {
		t.Errorf("the engine refused the compiled policy: %v", err)
	}
	roundTrip(t, c.file)
}

var totalErrorCases = []struct{ name, in, want string }{
	{"unknown total", "[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n",
		`p.toml:4:9: rule "r": total: no [[total]] named "up"`},
	{"global total", "[[total]]\nname = \"up\"\npps = 10\nscope = \"global\"\n[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n",
		`p.toml:4:9: total.scope: total up: "global" needs the [redis] table: the addrs of the store the hosts share`},
	{"global total, shaping rule", "[redis]\naddrs = [\"127.0.0.1:6379\"]\n[[total]]\nname = \"up\"\npps = 10\nscope = \"global\"\n[[rule]]\nname = \"r\"\npps = 1\nshape = true\ntotal = \"up\"\n",
		`p.toml:11:9: rule "r": total: a shaping rule cannot charge a global total: its budget comes in leases from the store, not as a departure time per packet (make the total local, or police)`},
	{"global total, window counter", "[redis]\naddrs = [\"127.0.0.1:6379\"]\n[[total]]\nname = \"up\"\npps = 10\nalgo = \"sliding-window-counter\"\nscope = \"global\"\n[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n",
		`p.toml:6:8: total.algo: total up: a global limit is a token-bucket or fixed-window one, not sliding-window-counter`},
	{"unknown scope", "[[total]]\nname = \"up\"\npps = 10\nscope = \"fleet\"\n[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n",
		`p.toml:4:9: total.scope: total up: unknown scope "fleet" (want local or global)`},
	{"shaping rule, window total", "[[total]]\nname = \"up\"\npps = 10\nalgo = \"fixed-window\"\n[[rule]]\nname = \"r\"\npps = 1\nshape = true\ntotal = \"up\"\n",
		`p.toml:9:9: rule "r": total: a shaping rule's total is a token bucket (it holds packets until the total has room): not a window algorithm`},
	{"global rule", "[redis]\naddrs = [\"127.0.0.1:6379\"]\n[[total]]\nname = \"up\"\npps = 10\n[[rule]]\nname = \"r\"\npps = 1\nscope = \"global\"\ntotal = \"up\"\n",
		`p.toml:10:9: rule "r": total: a global rule cannot charge a total: its budget comes in leases from the store, which cannot be handed back when the total refuses a packet`},
	{"accept rule", "[[total]]\nname = \"up\"\npps = 10\n[[rule]]\nname = \"r\"\naction = \"accept\"\ntotal = \"up\"\n",
		`p.toml:7:9: rule "r": total: not allowed on an accept rule: only limit rules take it`},
	{"sliding-window total", "[[total]]\nname = \"up\"\npps = 10\nalgo = \"sliding-window\"\n[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n",
		`p.toml:4:8: total.algo: total up: a total is a token-bucket, fixed-window or sliding-window-counter limit, not sliding-window`},
	{"leaky-bucket total", "[[total]]\nname = \"up\"\npps = 10\nalgo = \"leaky-bucket\"\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:4:8: total.algo: total up: a total is token-bucket, fixed-window or sliding-window-counter, not "leaky-bucket"`},
	{"no rate", "[[total]]\nname = \"up\"\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:1:1: total up: needs pps or bitrate`},
	{"both rates", "[[total]]\nname = \"up\"\npps = 1\nbitrate = \"1mbit\"\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:4:11: total.bitrate: total up: pps and bitrate are exclusive: give one`},
	{"bad burst", "[[total]]\nname = \"up\"\npps = 1\nburst = 0.5\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:4:9: total.burst: total up: must be at least 1, not 0.5`},
	{"twice", "[[total]]\nname = \"up\"\npps = 1\n[[total]]\nname = \"up\"\npps = 2\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:5:8: total.name: total up: declared twice`},
	{"no name", "[[total]]\npps = 1\n[[rule]]\nname = \"r\"\npps = 1\n",
		`p.toml:1:1: total.name: total #1: missing: every total needs a unique name`},
	{"typo", "[[total]]\nname = \"up\"\nppps = 1\n",
		`p.toml:3:1: total.ppps: unknown field (did you mean "pps"?)`},
	{"[total]", "[total]\nname = \"up\"\n", `p.toml:1:2: total: write [[total]] for each total, not [total]`},
	{"total = ", "total = 1\n", `p.toml:1:1: total: write a [[total]] table for each total`},
	{"[[total.x]]", "[[total.x]]\n", `p.toml:1:9: total.x: not a table`},
}

// TestTotalErrors: what check refuses about totals, [[total]] tables and
// a rule's own, each in one line naming the field.
func TestTotalErrors(t *testing.T) {
	for _, c := range append(totalErrorCases, ownTotalErrorCases...) {
		_, err := Parse("p.toml", []byte(c.in))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: more than one line: %q", c.name, err)
		}
	}
}

// ownTotalPolicy gives rules their own totals, in the three ways TOML
// writes a table.
const ownTotalPolicy = `
[[rule]]
name = "guest-hosts"
key = "src"
bitrate = "5mbit"
total = { bitrate = "20mbit", burst = 100000 }

[[rule]]
name = "api"
key = "src"
pps = 100
total.pps = 2000
total.algo = "sliding-window-counter"

[[rule]]
name = "dns"
match = { proto = ["udp"], dport = [53] }
key = "src"
pps = 10

[rule.total]
pps = 50
`

// TestOwnTotal: a [rule.total] table is a total that rule alone charges,
// named after it.
func TestOwnTotal(t *testing.T) {
	c := mustCompile(t, ownTotalPolicy, Options{})
	p := c.Policy()
	want := []shaper.Total{
		{Name: "rule:guest-hosts", Limit: shaper.TotalConfig{Rate: 20e6 / 8, Bytes: true, Burst: 100000}},
		{Name: "rule:api", Limit: shaper.TotalConfig{Algorithm: shaper.SlidingWindowCounter, Rate: 2000}},
		{Name: "rule:dns", Limit: shaper.TotalConfig{Rate: 50}},
	}
	if len(p.Totals) != len(want) {
		t.Fatalf("totals %+v, want %+v", p.Totals, want)
	}
	for i := range want {
		if p.Totals[i] != want[i] || p.Rules[i].Total != want[i].Name {
			t.Errorf("total %d: %+v (rule's %q), want %+v", i, p.Totals[i], p.Rules[i].Total, want[i])
		}
	}
	roundTrip(t, c.file)
}

var ownTotalErrorCases = []struct{ name, in, want string }{
	{"both", "[[total]]\nname = \"up\"\npps = 9\n[[rule]]\nname = \"r\"\npps = 1\ntotal = \"up\"\n[rule.total]\npps = 2\n",
		`p.toml:8:7: rule "r": total: defined twice (first on line 7)`},
	{"named", "[[rule]]\nname = \"r\"\npps = 1\ntotal = { name = \"x\", pps = 2 }\n",
		`p.toml:4:11: rule "r": total.name: a rule's own total has no name: write a [[total]] to share one`},
	{"typo", "[[rule]]\nname = \"r\"\npps = 1\ntotal.burts = 2\n",
		`p.toml:4:7: rule "r": total.burts: unknown field (did you mean "burst"?)`},
	{"no rate", "[[rule]]\nname = \"r\"\npps = 1\n[rule.total]\nburst = 2\n",
		`p.toml:4:7: rule "r": total: needs pps or bitrate`},
	{"bad burst", "[[rule]]\nname = \"r\"\npps = 1\n[rule.total]\npps = 2\nburst = 0\n",
		`p.toml:6:9: rule "r": total.burst: must be at least 1, not 0`},
	{"accept", "[[rule]]\nname = \"r\"\naction = \"accept\"\n[rule.total]\npps = 2\n",
		`p.toml:4:7: rule "r": total: not allowed on an accept rule: only limit rules take it`},
	{"global, no [redis]", "[[rule]]\nname = \"r\"\npps = 1\n[rule.total]\npps = 2\nscope = \"global\"\n",
		`p.toml:6:9: rule "r": total.scope: "global" needs the [redis] table: the addrs of the store the hosts share`},
	{"shape, window total", "[[rule]]\nname = \"r\"\npps = 1\nshape = true\n[rule.total]\npps = 2\nalgo = \"sliding-window-counter\"\n",
		`p.toml:5:7: rule "r": total: a shaping rule's total is a token bucket (it holds packets until the total has room): not a window algorithm`},
}

// TestTotalShaping: a shaping rule may charge a token-bucket total (its
// keys share it fairly, package shaper's fair.go), and the engine takes it.
func TestTotalShaping(t *testing.T) {
	c := mustCompile(t, "[[total]]\nname = \"guests\"\nbitrate = \"20mbit\"\n[[rule]]\nname = \"r\"\nkey = \"src\"\nbitrate = \"5mbit\"\nshape = true\nmax-delay = \"50ms\"\ntotal = \"guests\"\n", Options{})
	p := c.Policy()
	if p.Rules[0].Total != "guests" || !p.Rules[0].Limit.Shape {
		t.Fatalf("rule %+v: want a shaping rule charging guests", p.Rules[0])
	}
	if _, err := shaper.NewPolicy(p); err != nil {
		t.Errorf("the engine refused the compiled policy: %v", err)
	}
}

// TestGlobalTotal: scope = "global" on a [[total]] or a rule's own total
// compiles to a global engine total (its source the daemon's), named by
// GlobalTotals; the [redis] table is then in use (no warning), the rule
// itself stays local, and Format writes it back.
func TestGlobalTotal(t *testing.T) {
	src := "[redis]\naddrs = [\"127.0.0.1:6379\"]\n[[total]]\nname = \"fleet\"\npps = 2000\nscope = \"global\"\n" +
		"[[rule]]\nname = \"api\"\nmatch = { proto = [\"tcp\"] }\nkey = \"src\"\npps = 100\ntotal = \"fleet\"\n" +
		"[[rule]]\nname = \"dns\"\npps = 10\n[rule.total]\npps = 50\nalgo = \"fixed-window\"\nscope = \"global\"\n"
	c := mustCompile(t, src, Options{})
	p := c.Policy()
	want := []shaper.Total{
		{Name: "fleet", Limit: shaper.TotalConfig{Rate: 2000, Global: true}},
		{Name: "rule:dns", Limit: shaper.TotalConfig{Algorithm: shaper.FixedWindow, Rate: 50, Global: true}},
	}
	if len(p.Totals) != 2 || p.Totals[0] != want[0] || p.Totals[1] != want[1] {
		t.Errorf("totals %+v, want %+v", p.Totals, want)
	}
	if p.Rules[0].Limit.Global || p.Rules[1].Limit.Global {
		t.Error("a rule under a global total became global")
	}
	if got := strings.Join(c.GlobalTotals(), ","); got != "fleet,rule:dns" {
		t.Errorf("GlobalTotals = %q", got)
	}
	if w := otherWarnings(c); len(w) != 0 {
		t.Errorf("warnings %q, want none: the global totals use the store", w)
	}
	if _, err := shaper.NewPolicy(p); err != nil {
		t.Errorf("the engine refused the compiled policy (no source: local): %v", err)
	}
	roundTrip(t, c.file)
}
