package control

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenErrorTyped: Listen's errors are *ListenError naming the path,
// matching ErrInUse or ErrNotSocket, with no "control socket" prefix (the
// caller adds its context).
func TestListenErrorTyped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ps.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(path)
	var le *ListenError
	if !errors.As(err, &le) || le.Path != path || !errors.Is(err, ErrInUse) {
		t.Fatalf("over a live socket: %#v, want a *ListenError for %s matching ErrInUse", err, path)
	}
	if want := path + ": in use by another process"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	_, err = Listen(filepath.Join(dir, "ps.sock", "x.sock"))
	if !errors.As(err, &le) || strings.Contains(err.Error(), "control socket") {
		t.Errorf("under a socket: %v, want a *ListenError without a prefix", err)
	}
}
