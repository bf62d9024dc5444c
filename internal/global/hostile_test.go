package global

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// A hostile or impersonated store (issue 29): a small TCP server speaking
// just enough RESP2 (testutil.FakeRedis) that answers EVALSHA with what the
// test says, a huge array or bulk string header among them.

// startFake starts a testutil.FakeRedis on a loopback port.
func startFake(t testing.TB, evalsha []byte, closeAfter bool) *testutil.FakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.StartFakeRedis(t, ln, evalsha, closeAfter)
}

// goodReply is a lease script reply granting n.
func goodReply(n int64) []byte {
	return fmt.Appendf(nil, "*7\r\n:%d\r\n:1\r\n:%d\r\n:0\r\n:0\r\n:1000\r\n:1000\r\n", n, n)
}

// hostileReplies are replies that go-redis, unbounded, cannot take: it
// panics (makeslice: len out of range) on the first two.
var hostileReplies = []struct{ name, reply string }{
	{"array 2^63-1", "*9223372036854775807\r\n"},
	{"bulk 2^63-1", "$9223372036854775807\r\n"},
	{"array 2^32", "*4294967296\r\n"},
	{"bulk 2^32", "$4294967296\r\n"},
	{"nested arrays", strings.Repeat("*1\r\n", 20) + ":1\r\n"},
	{"arrays of arrays", strings.Repeat("*1000000\r\n", 2)}, // 16 MB each
	{"RESP3 map", "%9223372036854775807\r\n"},
	{"line without end", "+" + strings.Repeat("x", 100<<10)},
}

// TestHostileStore: a store answering the lease script with a header that
// declares 2^63-1 elements (or another reply past the bounds) fails the
// asks: the rule falls back to its local limit, the client counts the
// errors, and the process goes on (before the bound, the first two
// panicked in go-redis: the test process died). When the store answers
// well again, the rule is back on leases (the refused connection was
// dropped and a new one made).
func TestHostileStore(t *testing.T) {
	for _, tc := range hostileReplies {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, []byte(tc.reply), false)
			testHostileStore(t, f, Config{Addrs: []string{f.Addr()}, Timeout: 100 * time.Millisecond, Probe: 20 * time.Millisecond}, "store reply refused")
		})
	}
}

// TestStorePanicRecovered: with the bounds off (go-redis's own dialer), the
// same replies make go-redis panic inside the client's calls: the panic is
// recovered, counted as an error, the client replaced; the rule falls back
// and returns as above. Only the two replies whose panic is immediate
// (the others would exhaust memory, which nothing recovers: the bounds
// are what stops them).
func TestStorePanicRecovered(t *testing.T) {
	for _, tc := range hostileReplies[:2] {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, []byte(tc.reply), false)
			testHostileStore(t, f, Config{Addrs: []string{f.Addr()}, Timeout: 100 * time.Millisecond, Probe: 20 * time.Millisecond, unbounded: true}, "panicked")
		})
	}
}

func testHostileStore(t *testing.T, f *testutil.FakeRedis, cfg Config, wantErr string) {
	limit := shaper.Config{Rate: 500, Burst: 50}
	h := newHost(t, cfg, limit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.drive(ctx, []flows.Key{key(1), key(2)}, 1000, 0)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s: rule %+v, client %+v\n%s", what, h.r.Stats(), h.c.Stats(), h.log.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("fallback", func() bool { return h.r.Stats().Fallback })
	st := h.c.Stats()
	if st.Errors == 0 || !strings.Contains(st.LastError, wantErr) {
		t.Errorf("client %+v: want errors counted, the last one saying %q", st, wantErr)
	}
	if r := h.r.Stats().FallbackRate; r != 500 {
		t.Errorf("fallback rate %v, want 500", r)
	}
	if f.Evals() == 0 {
		t.Errorf("the store was never asked")
	}
	// Still falling back while the store stays hostile (probes fail).
	e := h.c.Stats().Errors
	waitFor("more errors", func() bool { return h.c.Stats().Errors > e })
	if !h.r.Stats().Fallback {
		t.Errorf("off the fallback while the store is hostile: %+v", h.r.Stats())
	}
	cancel() // no traffic
	time.Sleep(300 * time.Millisecond)
	f.Set(goodReply(25))
	// With no key active a probe is a PING, which the hostile store
	// answers well: the rule may be back on leases before Set, and the
	// refresher's turn under way at Set may still be reading a hostile
	// reply to an ask it sent before (seen under load: "2 more errors",
	// the two asks of one pipeline refused after the rule was back). The
	// turns are sequential and each counts its errors before it ends:
	// once the next one starts, every ask still to come was sent after
	// Set and gets the good reply.
	turn := h.c.turns.Load()
	waitFor("a turn of the refresher after the store answers well", func() bool { return h.c.turns.Load() > turn })
	waitFor("back on leases", func() bool { return !h.r.Stats().Fallback })
	// And there to stay: no connection the refused reply poisoned is
	// used again.
	e = h.c.Stats().Errors
	time.Sleep(time.Second)
	// (A loaded machine may time an ask out: only a refused reply or a
	// panic would be the old connection's.)
	if st := h.c.Stats(); st.Errors != e && (strings.Contains(st.LastError, "refused") || strings.Contains(st.LastError, "panicked")) {
		t.Errorf("with the store answering well: %d more errors, client %+v", st.Errors-e, st)
	}
}

// TestRespGuard: the guard's verdict on streams, whole or cut anywhere.
func TestRespGuard(t *testing.T) {
	b := respBounds{elems: 10, bytes: 20, bulk: 8, line: 16}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"+OK\r\n", true},
		{"-ERR no\r\n", true},
		{":12\r\n", true},
		{"$3\r\nabc\r\n", true},
		{"$-1\r\n*-1\r\n*0\r\n", true},
		{"$8\r\n\n*\n$\n%x\r\n", true}, // a payload is not parsed
		{"*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n", true},
		{"*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n", true}, // bounds are per reply
		{"*3\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n", false},                        // 24 bytes > 20 in one reply
		{"$9\r\n", false},
		{"*11\r\n", false},
		{"*6\r\n*5\r\n", false}, // 11 in one reply
		{"*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n*5\r\n", true},
		{"*9223372036854775807\r\n", false},
		{"*92233720368547758070\r\n", false},
		{"*-2\r\n", false},
		{"*x\r\n", false},
		{"%1\r\n", false},
		{"+" + strings.Repeat("x", 17), false},
		{strings.Repeat("*1\r\n", maxDepth) + ":1\r\n", true},
		{strings.Repeat("*1\r\n", maxDepth+1), false},
	} {
		whole := guardScan(b, []byte(tc.in), len(tc.in))
		if (whole == nil) != tc.ok {
			t.Errorf("%q: %v, want ok %v", tc.in, whole, tc.ok)
		}
		for cut := 1; cut < len(tc.in); cut++ {
			if err := guardScan(b, []byte(tc.in), cut); (err == nil) != (whole == nil) {
				t.Errorf("%q in pieces of %d: %v, whole %v", tc.in, cut, err, whole)
			}
		}
	}
}

// guardScan runs a guard over in, read in pieces of n bytes.
func guardScan(b respBounds, in []byte, n int) error {
	g := newRespGuard(nil, b)
	for len(in) > 0 {
		k := min(n, len(in))
		if err := g.scan(in[:k]); err != nil {
			return err
		}
		in = in[k:]
	}
	return nil
}

// FuzzRespGuard: any stream, cut anywhere, gets the same verdict, and the
// guard never panics.
func FuzzRespGuard(f *testing.F) {
	for _, tc := range hostileReplies {
		f.Add([]byte(tc.reply), uint8(3))
	}
	f.Add(goodReply(3), uint8(1))
	f.Add([]byte("*2\r\n$3\r\nabc\r\n*1\r\n$-1\r\n"), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		b := respBounds{elems: 64, bytes: 256, bulk: 64, line: 64}
		whole := guardScan(b, in, len(in)+1)
		if err := guardScan(b, in, int(cut)+1); (err == nil) != (whole == nil) {
			t.Fatalf("%q in pieces of %d: %v, whole %v", in, int(cut)+1, err, whole)
		}
	})
}

// FuzzStoreReply: the fake store answers the lease script's EVALSHA with
// the fuzzer's bytes: the bounded client never panics and either parses a
// lease script reply or fails the ask; a well-formed reply of 7 integers
// is taken.
func FuzzStoreReply(f *testing.F) {
	for _, tc := range hostileReplies {
		f.Add([]byte(tc.reply))
	}
	f.Add(goodReply(5))
	f.Add([]byte("-NOSCRIPT No matching script\r\n"))
	f.Add([]byte("*7\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n$1\r\n1\r\n"))
	f.Add([]byte("*2\r\n*7\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n"))
	fs := startFake(f, nil, true)
	f.Fuzz(func(t *testing.T, in []byte) {
		fs.Set(in)
		c, err := Open(Config{Addrs: []string{fs.Addr()}, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st := c.st.(*redisStore)
		res := make([]askResult, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st.ask(ctx, []string{"k"}, []askArgs{tb("a", 0, 0, 1)}, res)
		if n := st.panics.Load(); n != 0 {
			t.Fatalf("%q: %d panics recovered behind the bounds", in, n)
		}
		var pe *PanicError
		if errors.As(res[0].err, &pe) {
			t.Fatalf("%q: %v", in, res[0].err)
		}
		if string(in) == string(goodReply(5)) && (res[0].err != nil || res[0].rep.granted != 5) {
			t.Fatalf("%q: %+v, want granted 5", in, res[0])
		}
	})
}
