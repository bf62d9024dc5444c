package policy

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLoadNotRegular: Load refuses what is not a regular file at once, in
// one line: a named pipe would otherwise block the read until a writer
// comes (a reload stuck for ever).
func TestLoadNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "p.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + ": not a regular file (a named pipe): a rule file must be one"},
		{dir, dir + ": not a regular file (a directory): a rule file must be one"},
		{"/dev/zero", "/dev/zero: not a regular file (a character device): a rule file must be one"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := Load(c.path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() != c.want {
				t.Errorf("Load(%s):\n got %v\nwant %s", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			// The goroutine stays blocked in open: the test binary
			// ends with it.
			t.Fatalf("Load(%s) still blocked after 10 s", c.path)
		}
	}
}
