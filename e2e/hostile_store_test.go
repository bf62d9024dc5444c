package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestHostileStoreE2E (issue 29): the real binary with a global rule whose
// store (testutil.FakeRedis, listening on B's loopback) answers the lease
// script with an array header of 2^63-1 elements. Before the reply bounds
// go-redis panicked and packetshaper exited with status 2 after about
// 1.4 s, which the unit does not restart. Now it keeps running, the rule
// falls back to its local limit (which the traffic shows), the errors are
// counted (redis_errors), and once the store answers well the rule is back
// on leases; it stops cleanly.
func TestHostileStoreE2E(t *testing.T) {
	needShaper(t)
	tp := newTopo(t)
	var ln net.Listener
	if err := testutil.Do(tp.B, func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	store := testutil.StartFakeRedis(t, ln, []byte("*9223372036854775807\r\n"), false)
	const rate, port = 300.0, 9150
	pol := filepath.Join(t.TempDir(), "hostile.toml")
	writePolicy(t, pol, fmt.Sprintf(`
[redis]
addrs = [%q]
timeout = "200ms" # a loaded machine does not time a good reply out

[[rule]]
name  = "g"
match = { proto = ["udp"] }
key   = "dst"
pps   = %g
burst = 30
scope = "global"
`, store.Addr(), rate))
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", fmt.Sprint(port), "--family", "ipv4")
	p := tp.startShaper("--queue", "0", "--policy", pol, "--stats-interval", "250ms")
	rc := tp.startRecv(fmt.Sprintf(":%d", port), "--duration", "30s", "--idle", "2s")
	sent := tp.send("--dst", fmt.Sprintf("%s:%d", tp.IPB, port), "--flows", "2", "--pps", "500", "--duration", "4s")
	recv := recvDone(rc, 20*time.Second)
	if p.exited() {
		t.Fatalf("packetshaper exited with the hostile store: %v\n%s", p.wait(0), indent(p.err.String()))
	}
	log := p.err.String()
	if !strings.Contains(log, "the store does not answer") || !strings.Contains(log, "store reply refused") {
		t.Errorf("no fallback line naming the refused reply:\n%s", indent(log))
	}
	if store.Evals() == 0 {
		t.Errorf("the store was never asked")
	}
	// The fallback's limit: one host, the whole rate, nothing to spend at
	// first (the lease asks failed before it), over the 4 s of sending.
	secs := 4.0
	t.Logf("sent %d at 1000/s, received %d in %.0f s: the fallback's %g/s allows at most %.0f", sent.Sent, recv.Total, secs, rate, 30+rate*secs)
	if float64(recv.Total) > 1.1*(30+rate*secs) || float64(recv.Total) < 0.5*rate*secs {
		t.Errorf("received %d, want about %g/s over %.0f s (the local fallback)", recv.Total, rate, secs)
	}
	// A store that answers well again: with traffic, the rule asks and
	// takes leases (over a new connection: the refused ones were dropped).
	// (25 tokens for 4 s with token leases; with rate leases, the
	// default, 25/s for 2 s)
	store.Set([]byte("*7\r\n:25000\r\n:1\r\n:25000\r\n:0\r\n:2000000\r\n:1000\r\n:1000\r\n"))
	tp.send("--dst", fmt.Sprintf("%s:%d", tp.IPB, port), "--flows", "1", "--pps", "100", "--duration", "1500ms")
	log = tp.stopShaper(p)
	_, _, final := finalStats(t, log)
	if !strings.Contains(final, "rule.g.global_mode=leases") || statField(t, final, "rule.g.global_granted") == 0 {
		t.Errorf("not on leases with the store answering well: %s", final)
	}
	if n := statField(t, final, "redis_errors"); n == 0 {
		t.Errorf("redis_errors=0 in the final stats: %s", final)
	}
}
