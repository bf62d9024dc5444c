package policy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

const ownerPolicy = `
[[rule]]
name = "root"
match = { uid = [0] }
action = "accept"

[[rule]]
name = "users"
match = { uid = ["1000-1999", 2500, "1500-2100"], proto = ["udp"] }
key = "uid"
pps = 50

[[rule]]
name = "staff"
match = { gid = ["50"] }
key = "gid+dst"
pps = 10

[[rule]]
name = "services"
match = { mark = "0x100/0xf00" }
key = "mark"
key-mark-mask = "0xff00"
pps = 5
`

// TestClassifyOwner: uid and gid matches, single ids and ranges; a packet
// without an owner meets no uid or gid constraint.
func TestClassifyOwner(t *testing.T) {
	c := mustCompile(t, ownerPolicy, Options{})
	p := pkt("udp 10.0.0.1:5000 > 10.0.0.2:9000")
	tcp := pkt("tcp 10.0.0.1:5000 > 10.0.0.2:9000")
	cls := c.Policy().Classifier
	for _, tc := range []struct {
		p    *flows.Packet
		m    shaper.Meta
		want int
	}{
		{p, shaper.Meta{UID: 0, HasOwner: true}, 0},
		{p, shaper.Meta{UID: 1000, HasOwner: true}, 1},
		{p, shaper.Meta{UID: 1999, HasOwner: true}, 1},
		{p, shaper.Meta{UID: 2100, HasOwner: true}, 1},
		{p, shaper.Meta{UID: 2500, HasOwner: true}, 1},
		{p, shaper.Meta{UID: 2101, HasOwner: true}, -1},
		{p, shaper.Meta{UID: 999, HasOwner: true}, -1},
		{tcp, shaper.Meta{UID: 1500, HasOwner: true}, -1},
		{p, shaper.Meta{UID: 4294967295, GID: 50, HasOwner: true}, 2},
		{p, shaper.Meta{UID: 0, GID: 50}, -1}, // no owner: neither uid 0 nor gid 50
		{p, shaper.Meta{UID: 1500, Mark: 0x1134}, 3},
		{p, shaper.Meta{}, -1},
	} {
		if got := cls.Classify(tc.p, &tc.m); got != tc.want {
			t.Errorf("%+v: rule %d, want %d", tc.m, got, tc.want)
		}
	}
	rules := c.Policy().Rules
	if got, want := rules[1].Match, "proto=udp uid=1000-2100,2500"; got != want {
		t.Errorf("canonical match %q, want %q", got, want)
	}
	if k := rules[3].Limit.Key; k.Mode != flows.ByMark|flows.NoAddr || k.MarkMask != 0xff00 {
		t.Errorf("services key %+v", k)
	}
	if got, want := DescribeKey(&rules[3].Limit.Key), "mark key-mark-mask=0xff00"; got != want {
		t.Errorf("DescribeKey %q, want %q", got, want)
	}
	if got, want := DescribeKey(&rules[2].Limit.Key), "gid+dst"; got != want {
		t.Errorf("DescribeKey %q, want %q", got, want)
	}
	if got := strings.Join(c.MetaRules(), ","); got != "root,users,staff,services" {
		t.Errorf("MetaRules %s", got)
	}
	// check says what becomes of ownerless packets (internal/divert's
	// TestUnseenOwner: and when the divert rules give none).
	w := strings.Join(otherWarnings(c), "\n")
	for _, want := range []string{`rule "users": match.uid: only packets a local socket sends (the OUTPUT chain) have an owner`, `rule "staff": match.gid`, "check warns when the divert rules feed it from INPUT or FORWARD only"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if strings.Contains(w, `rule "services"`) {
		t.Errorf("a mark key warned of owners:\n%s", w)
	}
	c2 := mustCompile(t, "[[rule]]\nname = \"u\"\nkey = \"uid+src\"\npps = 1\n", Options{})
	if w := strings.Join(c2.Warnings(), "\n"); !strings.Contains(w, `rule "u": key uid+src:`) || !strings.Contains(w, `share one flow, "no owner"`) {
		t.Errorf("warnings of a uid key: %s", w)
	}
	// check's printed policy keeps them.
	f, _ := Parse("p.toml", []byte(ownerPolicy))
	var b bytes.Buffer
	if err := f.WithDefaults().Format(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`key = "uid"`, `uid = ["1000-1999", "2500", "1500-2100"]`, `gid = ["50"]`, `key-mark-mask = "0xff00"`, `key = "gid+dst"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("formatted policy lacks %s:\n%s", want, b.String())
		}
	}
	f2, err := Parse("again.toml", b.Bytes())
	if err != nil {
		t.Fatalf("formatted policy does not parse: %v", err)
	}
	if c3, err := f2.Compile(Options{}); err != nil || c3.Policy().Rules[1].Match != rules[1].Match {
		t.Errorf("formatted policy compiles to %v, %v", c3, err)
	}
}

func TestOwnerErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`match = { uid = ["10-5"] }`, `match.uid: bad id range "10-5": 10 is above 5`},
		{`match = { uid = ["alice"] }`, `bad id "alice"`},
		{`match = { gid = ["4294967296"] }`, `bad id "4294967296"`},
		{`match = { uid = [] }`, `match.uid: empty list`},
		{`key = "uid+5tuple"`, `a 5-tuple is one socket`},
		{`key = "dst"` + "\nkey-mark-mask = \"0xff\"", `key-mark-mask: needs a mark key`},
		{`key = "mark"` + "\nkey-mark-mask = \"0\"", `a mask of 0 takes no bit`},
		{`key = "mark"` + "\nkey-mark-mask = \"0x1ffffffff\"", `bad mark mask`},
	} {
		src := "[[rule]]\nname = \"a\"\npps = 1\n" + tc.src + "\n"
		_, err := Parse("p.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
