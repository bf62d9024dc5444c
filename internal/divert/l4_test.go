package divert

import (
	"strings"
	"testing"
)

// TestNeededNarrow: the conntrack, SYN and ICMP type matches the divert
// rules carry when every rule that needs packets matches only those.
func TestNeededNarrow(t *testing.T) {
	for _, c := range []struct {
		name    string
		matches []string
		want    string
	}{
		{"new ssh connections", []string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`},
			"--family both --proto tcp --dport 22 --ctstate NEW"},
		{"states by protocol", []string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["udp"], ct-state = ["new", "related"]`},
			"--family both --proto tcp --dport 22 --ctstate NEW\n--family both --proto udp --ctstate NEW,RELATED"},
		{"states joined over a protocol's rules", []string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["tcp"], dport = ["25"], ct-state = ["related"]`},
			"--family both --proto tcp --dport 22 --ctstate NEW,RELATED\n--family both --proto tcp --dport 25 --ctstate NEW,RELATED"},
		{"states by protocol, none for one", []string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["udp"], dport = ["53"]`},
			"--family both --proto tcp --dport 22 --ctstate NEW\n--family both --proto udp --dport 53"},
		{"a rule of the protocol without ct-state needs every state", []string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["tcp"], dport = ["80"]`},
			"--family both --proto tcp --dport 22\n--family both --proto tcp --dport 80"},
		{"a ct-state rule of every protocol", []string{`ct-state = ["new"]`, `proto = ["udp"], ct-state = ["invalid"]`},
			"--family both --ctstate NEW,INVALID"},
		{"every state is no narrowing", []string{`ct-state = ["new", "established", "related", "invalid", "untracked"]`}, "--family both"},
		{"syn flood", []string{`tcp-flags = ["syn"]`}, "--family both --proto tcp --syn"},
		{"syn to a port", []string{`tcp-flags = ["syn/syn,ack,rst,fin"], dport = ["80", "443"]`},
			"--family both --proto tcp --dport 80 --syn\n--family both --proto tcp --dport 443 --syn"},
		{"syn/syn is not --syn", []string{`tcp-flags = ["syn/syn"]`}, "--family both --proto tcp"},
		{"a tcp rule without flags needs all of tcp", []string{`tcp-flags = ["syn"]`, `proto = ["tcp"], dport = ["25"]`},
			"--family both --proto tcp"},
		{"tcp-flags is tcp's only", []string{`tcp-flags = ["rst/rst"], proto = ["tcp", "udp"]`}, "--family both --proto tcp"},
		{"ping flood", []string{`icmp-type = ["echo-request"]`},
			"--family ipv4 --proto icmp --icmp-type 8\n--family ipv6 --proto icmpv6 --icmp-type 128"},
		{"icmp types of one family", []string{`icmp-type = ["icmp:3", "timestamp-request"]`},
			"--family ipv4 --proto icmp --icmp-type 3\n--family ipv4 --proto icmp --icmp-type 13"},
		{"a type-less icmp rule needs every type", []string{`icmp-type = ["echo-request"]`, `proto = ["icmp"]`},
			"--family ipv4 --proto icmp\n--family ipv6 --proto icmpv6 --icmp-type 128"},
		{"new pings", []string{`icmp-type = ["echo-request"], ct-state = ["new"]`, `tcp-flags = ["syn"], ct-state = ["new"]`},
			"--family ipv4 --proto icmp --icmp-type 8 --ctstate NEW\n--family both --proto tcp --syn --ctstate NEW\n--family ipv6 --proto icmpv6 --icmp-type 128 --ctstate NEW"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := parse(t, rules(c.matches...))
			got, skipped := Needed(f, []uint16{0})
			if g := argLines(got); g != c.want || len(skipped) != 0 {
				t.Errorf("Needed:\n%s\nskipped %v\nwant:\n%s", g, skipped, c.want)
			}
			// What rules.sh tags them with reads back as the same rule.
			for _, r := range got {
				back, _, err := FromOptions("0", r.Args())
				if err != nil {
					t.Fatalf("FromOptions(%q): %v", r.Args(), err)
				}
				back.QueueLo, back.QueueHi, back.Chain = 0, 0, ""
				if back.String() != r.String() {
					t.Errorf("FromOptions(%q) = %s, want %s", r.Args(), back.String(), r.String())
				}
			}
		})
	}
}

// TestParseTagNarrow: rules.sh's comments with the narrowing matches.
func TestParseTagNarrow(t *testing.T) {
	r, ok := ParseTag("packetshaper queue=0 proto=tcp dport=22 syn ctstate=NEW", IPv4)
	if !ok || !r.Syn || r.CtState != "NEW" || r.Dport == nil || r.Dport.Lo != 22 {
		t.Errorf("ParseTag: %+v %v", r, ok)
	}
	r, ok = ParseTag("packetshaper queue=0 proto=icmp icmptype=8 family=ipv4", IPv4)
	if !ok || !r.HasICMPType || r.ICMPType != 8 {
		t.Errorf("ParseTag: %+v %v", r, ok)
	}
	if _, ok := ParseTag("packetshaper queue=0 proto=icmp icmptype=800", IPv4); ok {
		t.Errorf("ParseTag took icmptype=800")
	}
}

// TestCtWarning: a ct-state rule beside one that needs every state is
// warned of; alone, or with the states narrowed, it is not.
func TestCtWarning(t *testing.T) {
	for _, c := range []struct {
		matches []string
		warn    bool
	}{
		{[]string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`}, false},
		{[]string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["udp"], ct-state = ["new", "related"]`}, false},
		{[]string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["udp"], dport = ["53"]`}, false},
		{[]string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, `proto = ["tcp"], dport = ["80"]`}, true},
		{[]string{`proto = ["tcp"], dport = ["22"], ct-state = ["new"]`, ``}, true},
		{[]string{`proto = ["udp"], dport = ["53"]`}, false},
	} {
		f := parse(t, rules(c.matches...))
		rs, _ := Needed(f, nil)
		if w := CtWarning(f, rs); (w != "") != c.warn || c.warn && !strings.Contains(w, `rule(s) "ra" match ct-state`) {
			t.Errorf("%v: warning %q, want one: %v", c.matches, w, c.warn)
		}
	}
}
