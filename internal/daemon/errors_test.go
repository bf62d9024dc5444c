package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/global"
	"github.com/packetshaper/packetshaper/policy"
)

// TestControlSocketErrorTyped: the control socket's error reaches the
// caller typed (*control.ListenError wrapping ErrNotSocket), with the
// flag's name as context and no "control socket: " inside, whether it is
// returned or, for an optional socket, logged.
func TestControlSocketErrorTyped(t *testing.T) {
	file := writeFile(t, t.TempDir(), "file", "", 0o644)
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	ln, err := listenControl(&Config{ControlSocket: file}, log)
	if ln != nil {
		ln.Close()
	}
	var le *control.ListenError
	if !errors.As(err, &le) || le.Path != file || !errors.Is(err, control.ErrNotSocket) {
		t.Fatalf("listenControl over a file: %#v, want a *control.ListenError for %s matching ErrNotSocket", err, file)
	}
	if want := "control socket: " + file + ": exists and is not a socket"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	ln, err = listenControl(&Config{ControlSocket: file, ControlSocketOptional: true}, log)
	if ln != nil || err != nil {
		t.Errorf("optional socket over a file: %v, %v; want neither", ln, err)
	}
	if got := logged.String(); !strings.Contains(got, "reach this process): "+file+": exists and is not a socket; give each") || strings.Contains(got, "control socket: ") {
		t.Errorf("optional socket over a file logged %q", got)
	}
}

// TestStoreErrorTyped: a store configuration global.Open refuses reaches
// the daemon's caller as a *global.ConfigError with "redis: " as context,
// not a message with a package prefix cut off.
func TestStoreErrorTyped(t *testing.T) {
	no, prefix := false, "ps:"
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	c, err := openClient(&policy.Redis{Cluster: &no, KeyPrefix: &prefix}, log)
	if c != nil {
		c.Close()
	}
	var ce *global.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Addrs" {
		t.Fatalf("openClient without addrs: %#v, want a *global.ConfigError for Addrs", err)
	}
	if want := "redis: no store address"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestPartErrorNamesPart: a PartError says its part once, before an error
// that does not name it, and unwraps to it.
func TestPartErrorNamesPart(t *testing.T) {
	inner := errors.New("listen tcp: address nonsense: missing port")
	for _, c := range []struct {
		err  *PartError
		want string
	}{
		{&PartError{PartMetrics, inner}, "metrics endpoint: listen tcp: address nonsense: missing port"},
		{&PartError{PartRealtime, errors.New("real-time priority 1: permission denied")}, "real-time priority 1: permission denied"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.err, got, c.want)
		}
	}
	if !errors.Is(&PartError{PartMetrics, inner}, inner) {
		t.Error("PartError does not unwrap to its error")
	}
}
