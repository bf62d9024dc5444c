package testutil

import (
	"errors"
	"net"
	"testing"
	"time"
)

func TestExactTokenBucket(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		ns          []int64
		burst, rate int64
		want        int
	}{
		{[]int64{0, 0, 0, 0}, 3, 1, 3},
		{[]int64{0, 0, 1000 * ms, 1000 * ms}, 1, 1, 2},
		{[]int64{0, 0, 999 * ms}, 1, 1, 1},
		// 2 → 1, +0.5 → 0.5, +0.5 → 0, 0.5 (dropped), +0.5 → 0.
		{[]int64{0, 10 * ms, 20 * ms, 30 * ms, 40 * ms}, 2, 50, 4},
	} {
		if got := ExactTokenBucket(tc.ns, tc.burst, tc.rate); got != tc.want {
			t.Errorf("ExactTokenBucket(%v, %d, %d) = %d, want %d", tc.ns, tc.burst, tc.rate, got, tc.want)
		}
	}
}

// fatalRecorder is a testing.TB whose Fatal records its arguments.
type fatalRecorder struct {
	testing.TB
	fatal []any
}

func (r *fatalRecorder) Helper()           {}
func (r *fatalRecorder) Fatal(args ...any) { r.fatal = args }

// TestMust: Must returns v when err is nil, and calls Fatal with err
// otherwise.
func TestMust(t *testing.T) {
	r := &fatalRecorder{TB: t}
	if got := Must(7, error(nil))(r); got != 7 || r.fatal != nil {
		t.Errorf("Must(7, nil) = %d, Fatal(%v)", got, r.fatal)
	}
	err := errors.New("no policy")
	Must(0, err)(r)
	if len(r.fatal) != 1 || r.fatal[0] != err {
		t.Errorf("Must(0, err): Fatal(%v), want Fatal(err)", r.fatal)
	}
}

func TestPolicyRule(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{PolicyRule("dns", `proto = ["udp"], dport = ["53"]`, "pps = 10", "burst = 2"),
			"\n[[rule]]\nname = \"dns\"\nmatch = { proto = [\"udp\"], dport = [\"53\"] }\npps = 10\nburst = 2\n"},
		{PolicyRule("rest", "", `action = "accept"`), "\n[[rule]]\nname = \"rest\"\naction = \"accept\"\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("PolicyRule: %q, want %q", tc.got, tc.want)
		}
	}
}

// TestReceive: Receive hands each datagram, with its sender, to each, and
// closes done once the connection is closed.
func TestReceive(t *testing.T) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	done := Receive(c, func(from net.Addr, b []byte) { got <- from.String() + " " + string(b) })
	tx, err := net.Dial("udp4", c.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for _, m := range []string{"one", "two"} {
		if _, err := tx.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
		if g, want := <-got, tx.LocalAddr().String()+" "+m; g != want {
			t.Errorf("received %q, want %q", g, want)
		}
	}
	c.Close()
	<-done
}
