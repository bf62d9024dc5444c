package fastpath

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

func pf(v float64) *float64 { return &v }

// TestCompileSplit: which rules run where, and why, one line each.
func TestCompileSplit(t *testing.T) {
	lim := func(name string, m *policy.Match) policy.Rule { return policy.Rule{Name: name, PPS: pf(10), Match: m} }
	redis := &policy.Redis{Addrs: []string{"127.0.0.1:6379"}}
	for _, tc := range []struct {
		name  string
		rules []policy.Rule
		redis *policy.Redis
		// want: per rule, "k" (kernel) or "u" (user space), then a
		// word of the reason.
		want []string
	}{
		{"accept drop limit", []policy.Rule{
			{Name: "a", Action: "accept", Match: &policy.Match{Proto: []string{"icmp"}}},
			{Name: "d", Action: "drop", Match: &policy.Match{Dport: []string{"23"}, Proto: []string{"tcp"}}},
			{Name: "l", PPS: pf(10), Match: &policy.Match{Src: []string{"10.0.0.0/8"}}},
		}, nil, []string{"k accept", "k drop", "k token-bucket"}},
		{"algorithms", []policy.Rule{
			{Name: "fw", PPS: pf(10), Algo: "fixed-window", Match: &policy.Match{Dport: []string{"1"}, Proto: []string{"udp"}}},
			{Name: "swc", PPS: pf(10), Algo: "sliding-window-counter", Match: &policy.Match{Dport: []string{"2"}, Proto: []string{"udp"}}},
			{Name: "log", PPS: pf(10), Algo: "sliding-window", Match: &policy.Match{Dport: []string{"3"}, Proto: []string{"udp"}}},
			{Name: "shape", PPS: pf(10), Algo: "leaky-bucket", Match: &policy.Match{Dport: []string{"4"}, Proto: []string{"udp"}}},
			{Name: "glob", PPS: pf(10), Scope: "global"},
		}, redis, []string{"k fixed-window", "k sliding-window-counter", "u sliding-window", "u shapes", "u global"}},
		{"inexact matches taint later limits only", []policy.Rule{
			lim("before", &policy.Match{Dst: []string{"10.1.0.0/16"}}),
			lim("q", &policy.Match{Queue: []int{1}}),
			{Name: "d", Action: "drop", Match: &policy.Match{Dst: []string{"10.2.0.0/16"}}},
			lim("after", &policy.Match{Dst: []string{"10.3.0.0/16"}}),
		}, nil, []string{"k token-bucket", "u queue", "k drop", "u second bucket"}},
		{"oif and many ports", []policy.Rule{
			lim("o", &policy.Match{Oif: []string{"eth0"}}),
			lim("p", &policy.Match{Proto: []string{"tcp"}, Dport: []string{"1", "3", "5", "7", "9"}}),
		}, nil, []string{"u output interface", "u port ranges"}},
		{"many port ranges", []policy.Rule{
			lim("p", &policy.Match{Proto: []string{"tcp"}, Dport: []string{"1", "3", "5", "7", "9"}}),
		}, nil, []string{"u port ranges"}},
		{"adjacent ranges merge to fit", []policy.Rule{
			lim("p", &policy.Match{Proto: []string{"tcp"}, Dport: []string{"1", "2", "3-9", "10", "20", "30", "40"}}),
		}, nil, []string{"k token-bucket"}},
		{"owner matches and keys stay in user space", []policy.Rule{
			{Name: "uid", Action: "drop", Match: &policy.Match{UID: []string{"1000"}}},
			{Name: "gid", Action: "accept", Match: &policy.Match{GID: []string{"100"}, Proto: []string{"udp"}}},
			{Name: "ku", PPS: pf(10), Key: "uid"},
			{Name: "km", PPS: pf(10), Key: "mark+src"},
		}, nil, []string{"u owner", "u owner", "u owner part", "u owner part"}},
		{"the matches of issue 28 run in user space for now", []policy.Rule{
			lim("ct", &policy.Match{CtState: []string{"new"}, Proto: []string{"tcp"}, Dport: []string{"22"}}),
			{Name: "syn", Action: "drop", Match: &policy.Match{TCPFlags: []string{"syn"}}},
			lim("ping", &policy.Match{ICMPType: []string{"echo-request"}}),
			lim("len", &policy.Match{Length: []string{"0-64"}, DSCP: []string{"ef"}}),
		}, nil, []string{"u ct-state match: user space for now", "u tcp-flags match", "u icmp-type match", "u length/dscp match"}},
		{"mark and ipv6 notes", []policy.Rule{
			lim("m", &policy.Match{Mark: "0x1/0x1", Family: "ipv4"}),
			lim("v6", &policy.Match{Src: []string{"fd00::/8"}}),
		}, nil, []string{"k before netfilter", "k token-bucket"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &policy.File{Rules: tc.rules, Redis: tc.redis}
			s, reasons, err := Compile(f, policy.Options{IfIndex: func(string) (uint32, bool) { return 7, true }})
			if err != nil {
				t.Fatal(err)
			}
			if len(reasons) != len(tc.rules) || len(s.Entries) != len(tc.rules) {
				t.Fatalf("%d reasons, %d entries for %d rules", len(reasons), len(s.Entries), len(tc.rules))
			}
			for i, r := range reasons {
				where, word, _ := strings.Cut(tc.want[i], " ")
				if r.Kernel != (where == "k") || !strings.Contains(r.Why, word) || strings.Contains(r.Why, "extension headers") || r.Rule != tc.rules[i].Name {
					t.Errorf("rule %d: %s; want %s", i, r, tc.want[i])
				}
				if strings.Contains(r.String(), "\n") {
					t.Errorf("reason of rule %d is not one line: %q", i, r)
				}
				if (s.Entries[i].Action == Punt) == r.Kernel {
					t.Errorf("rule %d: action %v but kernel %v", i, s.Entries[i].Action, r.Kernel)
				}
			}
		})
	}
}

// TestCompileEntries: the match tables and limiters as the kernel gets them.
func TestCompileEntries(t *testing.T) {
	f := &policy.File{Rules: []policy.Rule{
		{Name: "r", Bitrate: "8mbit", Burst: pf(3000), Key: "src", SrcPrefix4: func() *int { v := 24; return &v }(),
			Mode: "shadow", Match: &policy.Match{Src: []string{"10.1.0.0/16", "10.2.0.1"}, Proto: []string{"udp", "132"},
				Dport: []string{"100-200", "150-300", "301"}, Iif: []string{"eth1"}, Mark: "0x10/0xf0"}},
		{Name: "gone", Action: "drop", Match: &policy.Match{Iif: []string{"nope"}}},
	}}
	s, _, err := Compile(f, policy.Options{IfIndex: func(n string) (uint32, bool) { return 9, n == "eth1" }})
	if err != nil {
		t.Fatal(err)
	}
	e := s.Entries[0]
	if e.Action != Limit || e.Over != OverShadow || !e.Bytes || e.BurstN != 3000e9 || e.Key.SrcPrefix4 != 24 {
		t.Errorf("limiter: %+v", e)
	}
	if e.RateInt != 1e6 || e.RateHi != 0 || e.RateLo != 0 {
		t.Errorf("rate: %d %d %d", e.RateInt, e.RateHi, e.RateLo)
	}
	if len(e.Src) != 2 || e.Src[1] != netip.MustParsePrefix("10.2.0.1/32") {
		t.Errorf("src: %v", e.Src)
	}
	if e.Proto == nil || e.Proto[0] != 1<<17 || e.Proto[2] != 1<<(132-128) {
		t.Errorf("proto: %v", e.Proto)
	}
	if len(e.Dport) != 1 || e.Dport[0] != (PortRange{Lo: 100, Hi: 301}) {
		t.Errorf("dport: %v", e.Dport)
	}
	if len(e.Iif) != 1 || e.Iif[0] != 9 || !e.HasMark || e.Mark != 0x10 || e.Mask != 0xf0 {
		t.Errorf("iif/mark: %v %v %#x %#x", e.Iif, e.HasMark, e.Mark, e.Mask)
	}
	if !s.Entries[1].Never {
		t.Errorf("a rule whose only interface is unknown should match nothing")
	}
	if e.Orig != shaper.ActionLimit || s.Entries[1].Orig != shaper.ActionDrop {
		t.Errorf("orig actions: %v %v", e.Orig, s.Entries[1].Orig)
	}
}

// TestCompileTooMany: a policy over the kernel table's size stays in user
// space whole; a bad policy is policy's error.
func TestCompileTooMany(t *testing.T) {
	var rules []policy.Rule
	for i := range MaxRules + 1 {
		rules = append(rules, policy.Rule{Name: "r" + strconv.Itoa(i), Action: "accept", Match: &policy.Match{Dport: []string{strconv.Itoa(i)}}})
	}
	s, reasons, err := Compile(&policy.File{Rules: rules}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Kernel() || len(reasons) != len(rules) || !strings.Contains(reasons[0].Why, "more than") {
		t.Errorf("kernel %v, %d reasons: %v", s.Kernel(), len(reasons), reasons[0])
	}
	if _, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "x", PPS: pf(-1)}}}, policy.Options{}); err == nil {
		t.Error("a bad policy compiled")
	}
}
