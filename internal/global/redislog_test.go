package global

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRedisLogThroughSlog: go-redis's own "failed to dial" line, when the
// store is not there, comes out of packetshaper's slog logger, one line
// with msg=redis and level WARN.
func TestRedisLogThroughSlog(t *testing.T) {
	var buf lockedBuffer
	SetRedisLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	// The package's other tests log to stderr again.
	t.Cleanup(func() { SetRedisLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))) })
	// A loopback port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	out := buf.String()
	if !strings.Contains(out, "failed to dial") {
		t.Fatalf("go-redis's dial failure is not in the slog output: %q", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, "level=WARN msg=redis err=") || strings.Contains(line, `err="redis:`) {
			t.Errorf("line %q: want level=WARN msg=redis err=... without go-redis's own prefix", line)
		}
	}
}
