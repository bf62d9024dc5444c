package control

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// stdJSON is what encoding/json writes for f (no HTML escaping, no
// newline).
func stdJSON(t *testing.T, f *Flow) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode((*flowFields)(f)); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var oddStrings = []string{"", "web", "udp 10.0.0.1:1 > 10.0.0.2:2", "src 10.1.2.0/24", `q"uote\back`, "tab\tnl\ncr\r\x00\x1f\x7f",
	"ünïcødé ☃", "\u2028\u2029", "bad \xff utf8 \xc3", "<html>&amp;", "\\u0041"}

func randFlow(r *rand.Rand) Flow {
	floats := []float64{0, 1, 0.5, 1e-7, 1.5e-6, 123456.789, 1e21, 4.99999, 1e20, 3e-300, 5 + 1e-9}
	return Flow{
		Queue: uint16(r.IntN(65536)), Rule: oddStrings[r.IntN(len(oddStrings))], Key: oddStrings[r.IntN(len(oddStrings))],
		Packets: r.Uint64(), Accepted: uint64(r.IntN(1000)), Dropped: r.Uint64() >> r.IntN(64),
		ShadowDropped: uint64(r.IntN(3)) * r.Uint64() >> r.IntN(64), Marked: uint64(r.IntN(3)) * r.Uint64() >> r.IntN(64),
		Left: floats[r.IntN(len(floats))] * float64(r.IntN(3)), Unit: oddStrings[r.IntN(len(oddStrings))],
		IdleSecs: floats[r.IntN(len(floats))] + r.Float64(), Expired: r.IntN(2) == 0,
	}
}

// TestFlowJSON: AppendJSON writes what encoding/json writes, and
// UnmarshalJSON reads back what encoding/json reads, for odd strings and
// numbers too.
func TestFlowJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		f := randFlow(r)
		got := string(f.AppendJSON(nil))
		if want := stdJSON(t, &f); got != want {
			t.Fatalf("flow %d: AppendJSON\n%s\nencoding/json\n%s", i, got, want)
		}
		var back, std Flow
		if err := back.UnmarshalJSON([]byte(got)); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(got), (*flowFields)(&std)); err != nil {
			t.Fatal(err)
		}
		if back != std {
			t.Fatalf("flow %d: UnmarshalJSON %+v, encoding/json %+v", i, back, std)
		}
	}
	// Lines the fast path does not take: the same as encoding/json, errors
	// included.
	for _, in := range []string{
		`{}`, ` { "key" : "a" , "packets" : 3 } `, `{"packets":1,"packets":2}`, `{"left":1e3,"idle_secs":-0.5}`,
		`{"rule":"a\"b","key":"\u00e9"}`, `{"Queue":3}`, `{"queue":70000}`, `{"queue":"3"}`, `{"packets":-1}`,
		`{"unknown":[1,2],"key":"k"}`, `{"expired":null}`, `{"key":"k"`, `{"key":"k"} x`, `[1]`, `{"left":1.5.5}`,
	} {
		var fast, std Flow
		errF := fast.UnmarshalJSON([]byte(in))
		errS := json.Unmarshal([]byte(in), (*flowFields)(&std))
		if (errF == nil) != (errS == nil) || errF == nil && fast != std {
			t.Errorf("UnmarshalJSON(%s) = %+v, %v; encoding/json %+v, %v", in, fast, errF, std, errS)
		}
	}
}

func BenchmarkFlowJSON(b *testing.B) {
	f := Flow{Queue: 1, Rule: "web", Key: "udp 10.213.0.1:20000 > 10.213.0.2:9000", Packets: 1234, Accepted: 5, Dropped: 1229, Left: 0.25, Unit: "packets", IdleSecs: 1.5}
	var buf []byte
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			buf = f.AppendJSON(buf[:0])
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		line := f.AppendJSON(nil)
		var g Flow
		for b.Loop() {
			g.UnmarshalJSON(line)
		}
	})
	// encoding/json, which AppendJSON and UnmarshalJSON replace. Flow
	// has its own methods, so the standard package is given a copy
	// without them.
	type plain Flow
	b.Run("encoding-json-marshal", func(b *testing.B) {
		p := plain(f)
		for b.Loop() {
			buf, _ = json.Marshal(&p)
		}
	})
	b.Run("encoding-json-unmarshal", func(b *testing.B) {
		line := f.AppendJSON(nil)
		var g plain
		for b.Loop() {
			json.Unmarshal(line, &g)
		}
	})
}
