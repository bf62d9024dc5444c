package control

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRunning: the live sockets named as DefaultPath names them are
// listed; a stale one, a file, and other names are not.
func TestRunning(t *testing.T) {
	dir := t.TempDir()
	serve := func(name string) {
		ln, err := Listen(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { Serve(ctx, ln, nil, nil); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	for _, q := range []string{"0", "6", "2-5"} {
		serve(filepath.Base(DefaultPath(q)))
	}
	serve("other.sock")
	// A stale socket: bound, its listener gone without removing it.
	stale := filepath.Join(dir, filepath.Base(DefaultPath("9")))
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	os.WriteFile(filepath.Join(dir, "packetshaper-7.sock"), nil, 0o600) // a file
	got, err := Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "packetshaper-2-5.sock"), filepath.Join(dir, "packetshaper-6.sock"), filepath.Join(dir, "packetshaper.sock")}
	if !slices.Equal(got, want) {
		t.Errorf("Running = %q, want %q", got, want)
	}
	if got, err := Running(filepath.Join(dir, "none")); err != nil || got != nil {
		t.Errorf("Running(no dir) = %q, %v; want none, no error", got, err)
	}
}

func TestIsDefaultName(t *testing.T) {
	for name, want := range map[string]bool{
		"packetshaper.sock": true, "packetshaper-6.sock": true, "packetshaper-0-3.sock": true, "packetshaper-65535.sock": true,
		"packetshaper-.sock": false, "packetshaper-6-.sock": false, "packetshaper-1-2-3.sock": false, "packetshaper-70000.sock": false,
		"packetshaper6.sock": false, "packetshaper-x.sock": false, "other.sock": false, "packetshaper.sock.bak": false, "packetshaper": false,
	} {
		if got := isDefaultName(name); got != want {
			t.Errorf("isDefaultName(%q) = %v, want %v", name, got, want)
		}
	}
	for _, q := range []string{"0", "6", "2-5"} {
		if !isDefaultName(filepath.Base(DefaultPath(q))) {
			t.Errorf("DefaultPath(%q)'s name is not recognised", q)
		}
	}
}
