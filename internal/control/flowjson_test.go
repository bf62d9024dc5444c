package control

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// stdJSON is what encoding/json writes for f (no HTML escaping, no
// newline).
func stdJSON(t *testing.T, f *Flow) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
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

// TestFlowJSON: AppendJSON writes what encoding/json writes, for odd
// strings and numbers too, and encoding/json reads it back.
func TestFlowJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		f := randFlow(r)
		got := string(f.AppendJSON(nil))
		if want := stdJSON(t, &f); got != want {
			t.Fatalf("flow %d: AppendJSON\n%s\nencoding/json\n%s", i, got, want)
		}
		var back Flow
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatal(err)
		}
		if back != f && !strings.ContainsRune(f.Rule+f.Key+f.Unit, utf8.RuneError) && utf8.ValidString(f.Rule+f.Key+f.Unit) {
			t.Fatalf("flow %d: read back %+v, wrote %+v", i, back, f)
		}
	}
}

// TestFlowJSONNonFinite: a NaN or an infinity is written as null (JSON has
// no such numbers; encoding/json refuses them), so the line stays valid
// JSON and reads back as 0.
func TestFlowJSONNonFinite(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		f := Flow{Rule: "r", Key: "k", Left: v, IdleSecs: v, Unit: "packets"}
		line := f.AppendJSON(nil)
		if !json.Valid(line) || bytes.Contains(line, []byte("NaN")) || bytes.Contains(line, []byte("Inf")) {
			t.Fatalf("%v: %s is not valid JSON", v, line)
		}
		var back Flow
		if err := json.Unmarshal(line, &back); err != nil || back.Left != 0 || back.IdleSecs != 0 || back.Rule != "r" {
			t.Fatalf("%v: %s read back as %+v, %v", v, line, back, err)
		}
	}
}

func BenchmarkFlowJSON(b *testing.B) {
	f := Flow{Queue: 1, Rule: "web", Key: "udp 10.213.0.1:20000 > 10.213.0.2:9000", Packets: 1234, Accepted: 5, Dropped: 1229, Left: 0.25, Unit: "packets", IdleSecs: 1.5}
	var buf []byte
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = f.AppendJSON(buf[:0])
		}
	})
	// encoding/json, which AppendJSON replaces: to keep it, AppendJSON
	// must stay at least twice as fast.
	b.Run("encoding-json-marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = json.Marshal(&f)
		}
	})
}
