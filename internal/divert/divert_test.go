package divert

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
)

func parse(t *testing.T, text string) *policy.File {
	t.Helper()
	f, err := policy.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return f
}

// rule is a [[rule]] table (testutil.PolicyRule).
var rule = testutil.PolicyRule

// A rule's commonest settings: accept, or limit to 10 packets/s.
const (
	accept = `action = "accept"`
	pps10  = "pps = 10"
)

// rules writes a policy of one limit rule per match.
func rules(matches ...string) string {
	var b strings.Builder
	for i, m := range matches {
		b.WriteString("[[rule]]\nname = \"r" + string(rune('a'+i)) + "\"\npps = 10\n")
		if m != "" {
			b.WriteString("match = { " + m + " }\n")
		}
	}
	return b.String()
}

func argLines(rs []Rule) string {
	var ls []string
	for i := range rs {
		ls = append(ls, strings.Join(rs[i].Args(), " "))
	}
	return strings.Join(ls, "\n")
}

func TestNeeded(t *testing.T) {
	for _, c := range []struct {
		name    string
		matches []string
		want    string
	}{
		{"dns", []string{`proto = ["udp"], dport = ["53"]`}, "--family both --proto udp --dport 53"},
		{"everything", []string{`proto = ["udp"], dport = ["53"]`, ``}, "--family both"},
		{"a catch-all of one family", []string{`proto = ["udp"], dport = ["53"]`, `family = "ipv6"`},
			"--family ipv4 --proto udp --dport 53\n--family ipv6"},
		{"replies by source port", []string{`proto = ["udp"], sport = ["53"]`}, "--family both --proto udp --sport 53"},
		{"ports without a protocol: every protocol with ports", []string{`dport = ["443"]`},
			"--family both --proto tcp --dport 443\n--family both --proto udp --dport 443\n--family both --proto sctp --dport 443\n--family both --proto udplite --dport 443"},
		{"ranges merged, a whole protocol subsumes its ports", []string{`proto = ["udp"], dport = ["9000-9010", "9005-9020", "9021", "53"]`, `proto = ["tcp"], dport = ["80"]`, `proto = ["tcp"]`},
			"--family both --proto tcp\n--family both --proto udp --dport 53\n--family both --proto udp --dport 9000-9021"},
		{"addresses narrow the family", []string{`src = ["10.1.0.0/16"], proto = ["udp"], dport = ["9000"]`},
			"--family ipv4 --proto udp --dport 9000"},
		{"icmp and icmpv6 are one rule", []string{`proto = ["icmp", "icmpv6"]`}, "--family both --proto icmp"},
		{"icmp alone is ipv4's", []string{`proto = ["icmp"]`}, "--family ipv4 --proto icmp"},
		{"a protocol rules.sh cannot name: everything", []string{`proto = ["99"]`}, "--family both"},
		{"esp", []string{`proto = ["50"]`}, "--family both --proto esp"},
		{"port 0 is a range for rules.sh", []string{`proto = ["udp"], dport = ["0", "2"]`}, "--family both --proto udp --dport 0-0\n--family both --proto udp --dport 2"},
		{"dport and sport: the destination ports", []string{`proto = ["tcp"], sport = ["1024-65535"], dport = ["22"]`}, "--family both --proto tcp --dport 22"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := parse(t, rules(c.matches...))
			got, skipped := Needed(f, []uint16{0})
			if g := argLines(got); g != c.want || len(skipped) != 0 {
				t.Errorf("Needed:\n%s\nskipped %v\nwant:\n%s", g, skipped, c.want)
			}
			// Every rule of the policy sees packets through them.
			for i := range f.Rules {
				if !Sees(&got[0], &f.Rules[i]) && !anySees(got, &f.Rules[i]) {
					t.Errorf("rule %s sees nothing through its own divert rules", f.Rules[i].Name)
				}
			}
			if ws := Unseen(f, got); len(ws) != 0 {
				t.Errorf("Unseen through the policy's own rules: %v", ws)
			}
		})
	}
}

func anySees(ds []Rule, r *policy.Rule) bool {
	for i := range ds {
		if Sees(&ds[i], r) {
			return true
		}
	}
	return false
}

func TestNeededLeavesAcceptRulesOut(t *testing.T) {
	f := parse(t, rule("mgmt", `proto = ["tcp"], dport = ["22"]`, accept)+
		rule("dns", `proto = ["udp"], dport = ["53"]`, pps10)+
		rule("rest", "", accept))
	got, _ := Needed(f, nil)
	if argLines(got) != "--family both --proto udp --dport 53" {
		t.Errorf("Needed: %s; want only udp/53 (accept rules' packets pass anyway)", argLines(got))
	}
	if ws := Unseen(f, got); len(ws) != 0 {
		t.Errorf("Unseen: %v; want no warning about accept rules", ws)
	}
}

func TestNeededQueuesAndBounds(t *testing.T) {
	f := parse(t, rules(`proto = ["udp"], dport = ["53"], queue = [1]`, `proto = ["tcp"], dport = ["80"]`))
	got, skipped := Needed(f, []uint16{0})
	if argLines(got) != "--family both --proto tcp --dport 80" || len(skipped) != 1 || skipped[0].Rule != "ra" {
		t.Errorf("queue 0: %s, skipped %v; want only tcp 80, ra skipped", argLines(got), skipped)
	}
	var ports []string
	for p := 1; p <= 2*MaxPortRanges+1; p += 2 {
		ports = append(ports, `"`+itoa(p)+`"`)
	}
	f = parse(t, rules(`proto = ["udp"], dport = [`+strings.Join(ports, ",")+`]`))
	if got, _ := Needed(f, nil); argLines(got) != "--family both --proto udp" {
		t.Errorf("%d ports: %s; want the whole protocol", len(ports), argLines(got))
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

const iptablesS = `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-A INPUT -p udp -m udp --dport 9000 -m conntrack --ctstate INVALID,NEW,RELATED,ESTABLISHED,UNTRACKED -m comment --comment "packetshaper queue=0 proto=udp dport=9000" -j NFQUEUE --queue-num 0 --queue-bypass
-A INPUT -p tcp -m comment --comment "someone else" -j ACCEPT
-A FORWARD -s 10.1.0.0/16 -m comment --comment "packetshaper queue=2-3 src=10.1.0.0/16" -j NFQUEUE --queue-balance 2:3 --queue-bypass
`

const nftList = `table inet packetshaper {
	chain input {
		type filter hook input priority -10; policy accept;
		meta l4proto udp th sport 53 ct state established,related,new,untracked,invalid counter packets 0 bytes 0 queue flags bypass to 0 comment "packetshaper queue=0 proto=udp sport=53 family=ipv6"
	}
}
`

func TestParseInForce(t *testing.T) {
	got := ParseIptables(iptablesS, IPv4)
	if len(got) != 2 {
		t.Fatalf("iptables -S: %d rules, want 2: %+v", len(got), got)
	}
	if r := got[0]; r.Family != IPv4 || r.Chain != "INPUT" || r.Proto != "udp" || r.Dport == nil || *r.Dport != (policy.PortRange{Lo: 9000, Hi: 9000}) || r.QueueLo != 0 || r.QueueHi != 0 {
		t.Errorf("first: %+v", r)
	}
	if r := got[1]; r.Chain != "FORWARD" || r.QueueLo != 2 || r.QueueHi != 3 || r.Src.String() != "10.1.0.0/16" || r.Proto != "" {
		t.Errorf("second: %+v", r)
	}
	n := ParseNft(nftList)
	if len(n) != 1 || n[0].Family != IPv6 || n[0].Chain != "INPUT" || n[0].Sport == nil || n[0].Sport.Lo != 53 || n[0].Proto != "udp" {
		t.Errorf("nft: %+v", n)
	}
	for _, bad := range []string{"", "packetshaper", "packetshaper proto=udp", "packetshaper queue=x", "packetshaper queue=0 dport=99999", "packetshaperx queue=0"} {
		if r, ok := ParseTag(bad, IPv4); ok {
			t.Errorf("ParseTag(%q) = %+v, want not rules.sh's", bad, r)
		}
	}
}

func TestFromOptions(t *testing.T) {
	for _, c := range []struct {
		queue, opts, want, policy, err string
	}{
		{"0", "--proto udp --dport 9000", "udp dport 9000 q0-0 both", "", ""},
		{"2-3", "--src fd00::/8 --backend nft --offload", "ipv6 from fd00::/8 q2-3 ipv6", "", ""},
		{"0", "--family ipv4 --chain forward", "every ipv4 packet q0-0 ipv4", "", ""},
		{"0", "--policy /etc/packetshaper/policy.toml", "every packet q0-0 both", "/etc/packetshaper/policy.toml", ""},
		{"0", "--proto udp --dport", "", "", "--dport needs a value"},
		{"0", "--bogus 1", "", "", "unknown option --bogus"},
		{"x", "", "", "", `QUEUE "x"`},
	} {
		r, pf, err := FromOptions(c.queue, strings.Fields(c.opts))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %q: %v, want an error with %q", c.queue, c.opts, err, c.err)
			}
			continue
		}
		got := r.String() + " q" + itoa(int(r.QueueLo)) + "-" + itoa(int(r.QueueHi)) + " " + r.Family
		if err != nil || got != c.want || pf != c.policy {
			t.Errorf("%s %q: %q, policy %q, %v; want %q, %q", c.queue, c.opts, got, pf, err, c.want, c.policy)
		}
	}
}

func TestUnseen(t *testing.T) {
	f := parse(t, rule("dns", `proto = ["udp"], dport = ["53"]`, pps10)+
		rule("app", `proto = ["udp"], dport = ["9000-9100"]`, pps10)+
		rule("other-queue", `queue = [1]`, pps10)+
		rule("v6", `src = ["fd00::/8"]`, pps10)+
		rule("tcp-any", `proto = ["tcp"]`, pps10)+
		rule("rest", "", accept))
	ds := ParseIptables(iptablesS, IPv4)[:1] // udp dport 9000, queue 0, IPv4
	var got []string
	for _, w := range Unseen(f, ds) {
		got = append(got, w.Rule)
	}
	if strings.Join(got, ",") != "dns,other-queue,v6,tcp-any" {
		t.Errorf("Unseen: %v; want dns, other-queue, v6, tcp-any", got)
	}
	ws := Unseen(f, ds)
	if s := ws[0].String(); s != `rule "dns" can never see a packet: it matches udp dport 53, but only ipv4 udp dport 9000 to queue 0 is diverted` {
		t.Errorf("warning: %s", s)
	}
	// Everything diverted: every rule sees packets.
	all := []Rule{{Family: Both, QueueLo: 0, QueueHi: 1}}
	if ws := Unseen(f, all); len(ws) != 0 {
		t.Errorf("everything diverted to 0-1: %v", ws)
	}
	// No divert rules known: nothing to say.
	if ws := Unseen(f, nil); ws != nil {
		t.Errorf("no divert rules: %v", ws)
	}
}

// TestUnseenOwner: a rule keyed or matched by the socket owner that the
// divert rules feed from INPUT or FORWARD only sees no packet with an
// owner: a warning; fed from OUTPUT (or a chain not known), none.
func TestUnseenOwner(t *testing.T) {
	f := parse(t, rule("users", `uid = ["1000-1999"], proto = ["udp"]`, `key = "uid"`, "pps = 100")+
		rule("by-gid", "", `key = "gid+dst"`, "pps = 100")+
		rule("by-mark", "", `key = "mark"`, "pps = 100"))
	for _, tc := range []struct {
		chains []string
		want   string
	}{
		{[]string{"INPUT"}, "users,by-gid"},
		{[]string{"INPUT", "FORWARD"}, "users,by-gid"},
		{[]string{"INPUT", "OUTPUT"}, ""},
		{[]string{"OUTPUT"}, ""},
		{[]string{""}, ""},
	} {
		var ds []Rule
		for _, c := range tc.chains {
			ds = append(ds, Rule{Family: Both, Chain: c})
		}
		var got []string
		for _, w := range Unseen(f, ds) {
			if !w.Owner {
				t.Errorf("%v: %s", tc.chains, w)
			}
			got = append(got, w.Rule)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("chains %v: owner warnings for %v, want %q", tc.chains, got, tc.want)
		}
	}
	ws := Unseen(f, []Rule{{Family: Both, Chain: "INPUT"}})
	if s := ws[0].String(); !strings.Contains(s, `rule "users" goes by the socket owner (key uid, match.uid)`) || !strings.Contains(s, "--chain OUTPUT") {
		t.Errorf("warning: %s", s)
	}
}
