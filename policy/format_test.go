package policy

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/shaper"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestCheckGolden pins what `packetshaper check` prints for the example of
// the rule file's documentation.
func TestCheckGolden(t *testing.T) {
	f, err := Load("testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := f.Format(&b); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/example.check.toml"
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("Format(example) differs from %s (go test -update rewrites it):\n%s", golden, b.Bytes())
	}
}

// reformat is Parse(Format(f)), and what Format wrote; an error of either
// is fatal.
func reformat(t testing.TB, f *File) (*File, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	if err := f.Format(&b); err != nil {
		t.Fatal(err)
	}
	g, err := Parse("formatted.toml", b.Bytes())
	if err != nil {
		t.Fatalf("Parse(Format(f)): %v\n%s", err, b.Bytes())
	}
	return g, &b
}

// roundTrip checks that Format writes what Parse reads back as f with its
// defaults filled in, and that this is a fixed point.
func roundTrip(t testing.TB, f *File) {
	t.Helper()
	g, b := reformat(t, f)
	want := f.WithDefaults().Rules
	if !reflect.DeepEqual(g.Rules, want) {
		t.Fatalf("Parse(Format(f)) != f.WithDefaults():\n got %s\nwant %s\n%s", dump(g.Rules), dump(want), b.Bytes())
	}
	if want := f.Redis.WithDefaults(); !reflect.DeepEqual(g.Redis, want) {
		t.Fatalf("Parse(Format(f)).Redis = %+v, want %+v\n%s", g.Redis, want, b.Bytes())
	}
	if d := g.WithDefaults().Rules; !reflect.DeepEqual(d, g.Rules) {
		t.Fatalf("Format(f) leaves defaults out:\n%s", b.Bytes())
	}
	c1, err := f.Compile(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := g.Compile(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p1, p2 := c1.Policy().Rules, c2.Policy().Rules; !reflect.DeepEqual(p1, p2) {
		t.Fatalf("compiled rules differ after Format:\n got %+v\nwant %+v", p2, p1)
	}
	if t1, t2 := c1.Policy().Totals, c2.Policy().Totals; !reflect.DeepEqual(t1, t2) {
		t.Fatalf("compiled totals differ after Format:\n got %+v\nwant %+v", t2, t1)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	example, err := os.ReadFile("testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	srcs := []string{string(example), classifyPolicy, globalPolicy, bigPolicy(20, 2000), `
[[rule]]
name = "strings"
match = { iif = ["e\"th", "ümlaut0"], mark = "0x0/0x1", queue = [0, 65535], family = "ipv6", proto = [0, 254] }
bitrate = "1gbit"
on-exceed = "mark"
set-mark = "16"
algo = "sliding-window-counter"
window = "1m30s"
flow-timeout = "1h"
`, shapePolicy}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		srcs = append(srcs, randomPolicy(rng, 1+rng.IntN(30), rng.IntN(2) == 0))
	}
	for _, src := range srcs {
		f, err := Parse("p.toml", []byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		roundTrip(t, f)
	}
}

// shapePolicy has shaping rules in each spelling.
const shapePolicy = `
[[rule]]
name = "tcp-20mbit"
match = { proto = ["tcp"] }
bitrate = "20mbit"
shape = true
max-delay = "50ms"

[[rule]]
name = "leaky"
algo = "leaky-bucket"
pps = 100
key = "src"

[[rule]]
name = "default-delay"
pps = 0.5
shape = true
flow-timeout = "11s"

[[rule]]
name = "polices"
pps = 10
shape = false
`

// TestShapeDefaults: shape and max-delay as Compile makes them, with their
// defaults, and the spellings that mean the same Config.
func TestShapeDefaults(t *testing.T) {
	c := mustCompile(t, shapePolicy, Options{})
	rules := c.Policy().Rules
	for i, want := range []struct {
		shape    bool
		maxDelay int64
	}{{true, 50e6}, {true, 50e6}, {true, 50e6}, {false, 0}} {
		if l := rules[i].Limit; l.Shape != want.shape || l.MaxDelay != want.maxDelay || l.Algorithm != shaper.TokenBucket {
			t.Errorf("rule %s: %+v, want shape %v, max delay %d", rules[i].Name, l, want.shape, want.maxDelay)
		}
	}
	// leaky-bucket is token-bucket with shape = true: the same Config, so
	// a reload from one spelling to the other keeps the rule's state.
	a, _ := Parse("a.toml", []byte("[[rule]]\nname = \"x\"\npps = 5\nalgo = \"leaky-bucket\"\n"))
	b, _ := Parse("b.toml", []byte("[[rule]]\nname = \"x\"\npps = 5\nshape = true\nmax-delay = \"50ms\"\n"))
	ca, _ := a.Compile(Options{})
	cb, _ := b.Compile(Options{})
	if ra, rb := ca.Policy().Rules[0], cb.Policy().Rules[0]; ra.Limit != rb.Limit {
		t.Errorf("leaky-bucket %+v != token-bucket with shape %+v", ra.Limit, rb.Limit)
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(classifyPolicy))
	f.Add([]byte(shapePolicy))
	f.Add([]byte(globalPolicy))
	f.Add([]byte(ownerPolicy))
	f.Add([]byte(totalPolicy))
	f.Add([]byte(ownTotalPolicy))
	for _, c := range ownTotalErrorCases {
		f.Add([]byte(c.in))
	}
	for _, c := range totalErrorCases {
		f.Add([]byte(c.in))
	}
	for _, c := range errorCases {
		f.Add([]byte(c.in))
	}
	for _, rate := range []string{"10mbps", "8KBPS", "1.1kibit", "0.3bit", " 2e6 ", "1.048576mbit"} {
		f.Add([]byte("[[rule]]\nname = \"a\"\nbitrate = \"" + rate + "\"\n"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.toml", data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is a %T: %v", err, err)
			}
			if bytes.ContainsRune([]byte(err.Error()), '\n') {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		roundTrip(t, file)
	})
}

// globalPolicy has global rules and a [redis] table.
var globalPolicy = `
redis = { addrs = ["127.0.0.1:6379"], password-file = "pw", key-prefix = "" }
` +
	ruleTable("g", `proto = ["udp"]`, `key = "dst"`, `pps = 3000`, `burst = 300`, `scope = "global"`, `global-slack = 0.1`) +
	ruleTable("fw", "", `algo = "fixed-window"`, `bitrate = "10mbit"`, `window = "100ms"`, `scope = "global"`) +
	ruleTable("rest", "", `pps = 1`, `scope = "local"`)

// TestBitrateUnits: a bitrate in tc's byte units is accepted with a warning
// naming the bit-rate it means and the bit form; check prints every bitrate
// in bits with an SI prefix and its bits per second, and integral numbers
// as integers.
func TestBitrateUnits(t *testing.T) {
	for _, c := range []struct{ in, canon, comment, warn string }{
		{"10mbps", "80mbit", "80000000 bits/s", `rule "a": bitrate "10mbps" is 10 megabytes per second, as in tc (mbps is bytes, mbit is bits): 80mbit, 80000000 bits/s; write "80mbit" for that rate, or "10mbit" for 10 megabits per second`},
		{"8kbps", "64kbit", "64000 bits/s", `rule "a": bitrate "8kbps" is 8 kilobytes per second, as in tc (kbps is bytes, kbit is bits): 64kbit, 64000 bits/s; write "64kbit" for that rate, or "8kbit" for 8 kilobits per second`},
		{"100bps", "800bit", "800 bits/s", `rule "a": bitrate "100bps" is 100 bytes per second, as in tc (bps is bytes, bit is bits): 800bit, 800 bits/s; write "800bit" for that rate, or "100bit" for 100 bits per second`},
		{"10MBPS", "80mbit", "80000000 bits/s", `rule "a": bitrate "10MBPS" is 10 megabytes per second, as in tc (mbps is bytes, mbit is bits): 80mbit, 80000000 bits/s; write "80mbit" for that rate, or "10mbit" for 10 megabits per second`},
		{"10mbit", "10mbit", "10000000 bits/s", ""},
		{"500kbit", "500kbit", "500000 bits/s", ""},
		{"0.5mbit", "500kbit", "500000 bits/s", ""},
		{"1.5mbit", "1.5mbit", "1500000 bits/s", ""},
		{"2000000", "2mbit", "2000000 bits/s", ""},
		{"1gbit", "1gbit", "1000000000 bits/s", ""},
		{"1mibit", "1.048576mbit", "1048576 bits/s", ""},
		{"0.3bit", "0.3bit", "0.3 bits/s", ""},
	} {
		src := "[[rule]]\nname = \"a\"\nbitrate = \"" + c.in + "\"\nburst = 1000000\n"
		f, comp := parseCompile(t, c.in, src, Options{})
		var warns []string
		if c.warn != "" {
			warns = []string{c.warn}
		}
		var got []string
		for _, w := range comp.Warnings() {
			if strings.HasPrefix(w, `rule "a": bitrate`) {
				got = append(got, w)
			}
		}
		if !reflect.DeepEqual(got, warns) {
			t.Errorf("%s: warnings\n got %q\nwant %q", c.in, got, warns)
		}
		var b bytes.Buffer
		if err := f.Format(&b); err != nil {
			t.Fatal(err)
		}
		want := "bitrate = \"" + c.canon + "\" # " + c.comment + "\nburst = 1000000 # bytes\n"
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("%s: check prints\n%s\nwant it to contain\n%s", c.in, b.Bytes(), want)
		}
		roundTrip(t, f)
	}
}
