package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/shaper"
)

func TestParseFields(t *testing.T) {
	const in = `
[[rule]]
name = "all.the_fields-1"
match = { family = "ipv4", src = ["10.0.0.0/8", "192.0.2.1"], dst = ["fd00::/8", "198.51.100.0/24"], proto = ["tcp", 17, "47"], sport = [1024, "2000-3000"], dport = ["53"], iif = ["eth0"], oif = ["eth1", "wg0"], mark = "0x10/0xff", queue = [0, 3] }
action = "limit"
mode = "shadow"
on-exceed = "mark"
set-mark = "0x1/0x1"
key = "src-dst"
src-prefix4 = 24
dst-prefix4 = 24
src-prefix6 = 64
dst-prefix6 = 64
symmetric = true
bitrate = "2mbit"
burst = 200000
algo = "sliding-window-counter"
window = "500ms"
max-flows = 1000
flow-timeout = "2m"

[[rule]]
name = "dotted"
action = "drop"
match.proto = ["icmp"]
match.queue = [1]

[[rule]]
name = "table"
pps = 1.5
[rule.match]
dport = ["80"]
`
	f, err := Parse("p.toml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{{
		Name: "all.the_fields-1",
		Match: &Match{
			Family: "ipv4", Src: []string{"10.0.0.0/8", "192.0.2.1"}, Dst: []string{"fd00::/8", "198.51.100.0/24"},
			Proto: []string{"tcp", "17", "47"}, Sport: []string{"1024", "2000-3000"}, Dport: []string{"53"},
			Iif: []string{"eth0"}, Oif: []string{"eth1", "wg0"}, Mark: "0x10/0xff", Queue: []int{0, 3},
		},
		Action: "limit", Mode: "shadow", OnExceed: "mark", SetMark: "0x1/0x1", Key: "src-dst",
		SrcPrefix4: ptr(24), DstPrefix4: ptr(24), SrcPrefix6: ptr(64), DstPrefix6: ptr(64), Symmetric: ptr(true),
		Bitrate: "2mbit", Burst: ptr(200000.0), Algo: "sliding-window-counter",
		Window: Duration(500 * time.Millisecond), MaxFlows: ptr(1000), FlowTimeout: Duration(2 * time.Minute),
	}, {
		Name: "dotted", Action: "drop", Match: &Match{Proto: []string{"icmp"}, Queue: []int{1}},
	}, {
		Name: "table", PPS: ptr(1.5), Match: &Match{Dport: []string{"80"}},
	}}
	if !reflect.DeepEqual(f.Rules, want) {
		t.Errorf("Parse:\n got %s\nwant %s", dump(f.Rules), dump(want))
	}

	// The same rules as a list of inline tables.
	g, err := Parse("p.toml", []byte(`rule = [
  { name = "dotted", action = "drop", match = { proto = ["icmp"], queue = [1] } },
  { name = "table", pps = 1.5, match = { dport = ["80"] } },
]`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Rules, want[1:]) {
		t.Errorf("Parse(inline):\n got %s\nwant %s", dump(g.Rules), dump(want[1:]))
	}
}

func dump(rs []Rule) string {
	b, _ := json.MarshalIndent(rs, "", "  ")
	return string(b)
}

// TestParseGlobal reads global rules and the [redis] table, written as a
// table, inline and dotted.
func TestParseGlobal(t *testing.T) {
	want := &Redis{Addrs: []string{"10.0.0.5:7000", "[fd00::5]:7001"}, Cluster: ptr(true), PasswordFile: "/etc/ps/redis.pw",
		Timeout: Duration(50 * time.Millisecond), RefreshInterval: Duration(250 * time.Millisecond), Leases: "token", KeyPrefix: ptr("ps:")}
	rules := ruleTable("g", "", `pps = 3000`, `burst = 300`, `scope = "global"`, `global-slack = 0.1`) +
		ruleTable("fw", "", `algo = "fixed-window"`, `bitrate = "10mbit"`, `scope = "global"`) +
		ruleTable("l", "", `pps = 5`, `scope = "local"`)
	for _, redis := range []string{
		"[redis]\naddrs = [\"10.0.0.5:7000\", \"[fd00::5]:7001\"]\ncluster = true\npassword-file = \"/etc/ps/redis.pw\"\ntimeout = \"50ms\"\nrefresh-interval = \"250ms\"\nleases = \"token\"\nkey-prefix = \"ps:\"\n",
		"redis = { addrs = [\"10.0.0.5:7000\", \"[fd00::5]:7001\"], cluster = true, password-file = \"/etc/ps/redis.pw\", timeout = \"50ms\", refresh-interval = \"250ms\", leases = \"token\", key-prefix = \"ps:\" }\n",
		"redis.addrs = [\"10.0.0.5:7000\", \"[fd00::5]:7001\"]\nredis.cluster = true\nredis.password-file = \"/etc/ps/redis.pw\"\nredis.timeout = \"50ms\"\nredis.refresh-interval = \"250ms\"\nredis.leases = \"token\"\nredis.key-prefix = \"ps:\"\n",
	} {
		f, err := Parse("p.toml", []byte(redis+rules))
		if err != nil {
			t.Fatalf("%v\n%s", err, redis)
		}
		if !reflect.DeepEqual(f.Redis, want) {
			t.Errorf("Redis = %+v, want %+v", f.Redis, want)
		}
		wantRules := []Rule{
			{Name: "g", PPS: ptr(3000.0), Burst: ptr(300.0), Scope: "global", GlobalSlack: ptr(0.1)},
			{Name: "fw", Algo: "fixed-window", Bitrate: "10mbit", Scope: "global"},
			{Name: "l", PPS: ptr(5.0), Scope: "local"},
		}
		if !reflect.DeepEqual(f.Rules, wantRules) {
			t.Errorf("Rules:\n got %s\nwant %s", dump(f.Rules), dump(wantRules))
		}
		c, err := f.Compile(Options{})
		if err != nil {
			t.Fatal(err)
		}
		p := c.Policy()
		if l := p.Rules[0].Limit; !l.Global || l.GlobalSlack != 0.1 {
			t.Errorf("rule g: Global %v, GlobalSlack %v", l.Global, l.GlobalSlack)
		}
		if l := p.Rules[1].Limit; !l.Global || l.GlobalSlack != DefaultGlobalSlack || l.Algorithm != shaper.FixedWindow {
			t.Errorf("rule fw: %+v", l)
		}
		if p.Rules[2].Limit.Global {
			t.Error("rule l is global")
		}
		if g := c.GlobalRules(); !reflect.DeepEqual(g, []string{"g", "fw"}) {
			t.Errorf("GlobalRules = %v", g)
		}
		if !reflect.DeepEqual(c.Redis(), want) {
			t.Errorf("Compiled.Redis = %+v", c.Redis())
		}
		roundTrip(t, f)
	}
	// Defaults, and a warning for a store no rule uses.
	f, err := Parse("p.toml", []byte("[redis]\naddrs = [\"r:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Compile(Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &Redis{Addrs: []string{"r:6379"}, Cluster: ptr(false), Timeout: DefaultRedisTimeout, RefreshInterval: DefaultRefreshInterval, Leases: DefaultLeases, KeyPrefix: ptr(DefaultKeyPrefix)}
	if !reflect.DeepEqual(c.Redis(), d) {
		t.Errorf("Redis with defaults = %+v, want %+v", c.Redis(), d)
	}
	if w := otherWarnings(c); len(w) != 1 || !strings.Contains(w[0], "no rule is global") {
		t.Errorf("Warnings = %q", w)
	}
}
