package policy

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
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
