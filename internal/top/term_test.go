package top

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// fakeSource gives the snapshots in turn, asked with the sorts recorded.
type fakeSource struct {
	snaps []*Snapshot
	sorts []Sort
}

func (f *fakeSource) source(s Sort) (*Snapshot, error) {
	f.sorts = append(f.sorts, s)
	if len(f.snaps) == 0 {
		return nil, errors.New("no shaper")
	}
	x := f.snaps[0]
	f.snaps = f.snaps[1:]
	return x, nil
}

func TestOnceFrameAndJSON(t *testing.T) {
	two := func() *fakeSource {
		return &fakeSource{snaps: []*Snapshot{
			snap(0, [4]uint64{0, 0, 0, 0}, [2]uint64{0, 0}, 0, flow("a", 0, 0), flow("b", 0, 0)),
			snap(2, [4]uint64{200, 150, 50, 0}, [2]uint64{200, 50}, 0, flow("a", 100, 50), flow("b", 100, 0)),
		}}
	}
	src := two()
	var out bytes.Buffer
	if err := Once(Options{Source: src.source, Interval: time.Millisecond, Sort: ByPackets, Rows: 1}, &out, 0); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"in 100 pkt/s  accepted 75.0/s  dropped 25.0/s", "flows by packets/s, rates over 2.0s", "(1 more flows)"} {
		if !strings.Contains(s, want) {
			t.Errorf("frame has no %q:\n%s", want, s)
		}
	}
	if len(src.sorts) != 2 || src.sorts[0] != ByPackets {
		t.Errorf("asked with sorts %v, want packets twice", src.sorts)
	}
	src = two()
	out.Reset()
	if err := Once(Options{Source: src.source, Interval: time.Millisecond, JSON: true, Rows: 5}, &out, 0); err != nil {
		t.Fatal(err)
	}
	var v View
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if !v.Rated || v.Header.Dropped != 25 || len(v.Flows) != 2 || v.Flows[0].Key != "a" || v.Flows[0].Rates.Dropped != 25 || v.Rules[0].Name != "web" {
		t.Errorf("--json: %+v", v)
	}
	// No shaper: the error, no frame.
	out.Reset()
	if err := Once(Options{Source: (&fakeSource{}).source, Interval: time.Millisecond}, &out, 0); err == nil || out.Len() != 0 {
		t.Errorf("no shaper: %v, output %q", err, out.String())
	}
}

func TestFrameANSI(t *testing.T) {
	f := Frame([]Line{{Text: "head", Head: true}, {Text: "row"}})
	if f != "\x1b[H\x1b[7mhead\x1b[0m\x1b[K\r\nrow\x1b[K\x1b[J" {
		t.Errorf("Frame: %q", f)
	}
	for _, c := range []struct {
		r    control.Rule
		want string
	}{
		{control.Rule{Action: "limit", Algorithm: "token-bucket", Rate: 10e6 / 8, Unit: "bytes", Burst: 125000, Shape: true, MaxDelaySecs: 0.05}, "10 Mbit/s shape"},
		{control.Rule{Action: "limit", Algorithm: "token-bucket", Rate: 10e6 / 8, Unit: "bytes", Burst: 125000}, "10 Mbit/s tb"},
		{control.Rule{Action: "limit", Algorithm: "token-bucket", Rate: 100, Unit: "packets", Burst: 5, Shape: true}, "100 pkt/s shape b5"},
	} {
		if got := DescribeLimit(&c.r); got != c.want {
			t.Errorf("DescribeLimit(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
	if DescribeLimit(&control.Rule{Action: "limit", Algorithm: "fixed-window", Rate: 2e6 / 8, Unit: "bytes", WindowSecs: 1, Shadow: true}) != "2 Mbit/s fw 1s shadow" {
		t.Errorf("DescribeLimit: %q", DescribeLimit(&control.Rule{Action: "limit", Algorithm: "fixed-window", Rate: 2e6 / 8, Unit: "bytes", WindowSecs: 1, Shadow: true}))
	}
}
