package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// BenchmarkListingSocket lists a million flows through the control socket,
// server and client: the listing's own cost, without a kernel.
func BenchmarkListingSocket(b *testing.B) {
	w := newTestWorker(b, rule("a", "", "pps = 0.001", "burst = 1", "max-flows = 1000000"))
	loadFlows(w, 1000000)
	r := startFakeRun(w, 100*time.Millisecond, nil)
	defer r.halt()
	d := &state{cfg: &Config{}, sh: w.shared}
	path := filepath.Join(b.TempDir(), "s.sock")
	ln, err := control.Listen(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go control.Serve(ctx, ln, d, nil)
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if _, err := control.ListFlows(path, control.Request{}, func(*control.Flow) error { n++; return nil }); err != nil || n != 1000000 {
			b.Fatal(n, err)
		}
	}
}
