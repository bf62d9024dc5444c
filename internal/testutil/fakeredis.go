package testutil

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FakeRedis is a hostile or impersonated store (issue 29): a small TCP
// server speaking just enough RESP2 to a go-redis client, answering the
// lease script's EVALSHA (and EVAL) with raw bytes the test sets: a huge
// array or bulk string header, a truncated reply, a good one. HELLO gets an
// error (a RESP2-only server), PING +PONG, SCRIPT LOAD the SHA-1 of its
// script, anything else +OK. With closeAfter it closes a connection after
// answering an EVALSHA (so that a truncated reply ends at EOF, not at the
// client's timeout).
type FakeRedis struct {
	ln         net.Listener
	evalsha    atomic.Pointer[[]byte]
	closeAfter bool
	evals      atomic.Int64
	conns      atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex
	open       []net.Conn
}

// StartFakeRedis serves ln (which it closes at the test's end, with every
// connection) with evalsha as the EVALSHA reply.
func StartFakeRedis(t testing.TB, ln net.Listener, evalsha []byte, closeAfter bool) *FakeRedis {
	t.Helper()
	f := &FakeRedis{ln: ln, closeAfter: closeAfter}
	f.Set(evalsha)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			f.mu.Lock()
			f.open = append(f.open, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.open {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// Set makes b the reply to every EVALSHA from now on.
func (f *FakeRedis) Set(b []byte) { f.evalsha.Store(&b) }

// Addr is the server's address.
func (f *FakeRedis) Addr() string { return f.ln.Addr().String() }

// Evals counts the EVALSHA and EVAL commands answered; Conns the
// connections accepted.
func (f *FakeRedis) Evals() int64 { return f.evals.Load() }
func (f *FakeRedis) Conns() int64 { return f.conns.Load() }

func (f *FakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var out []byte
		last := false
		switch strings.ToUpper(cmd[0]) {
		case "HELLO": // RESP2 only: go-redis goes on without it
			out = []byte("-ERR unknown command 'HELLO'\r\n")
		case "PING":
			out = []byte("+PONG\r\n")
		case "SCRIPT":
			sum := sha1.Sum([]byte(cmd[len(cmd)-1]))
			out = fmt.Appendf(nil, "$40\r\n%s\r\n", hex.EncodeToString(sum[:]))
		case "EVALSHA", "EVAL":
			f.evals.Add(1)
			out, last = *f.evalsha.Load(), f.closeAfter
		default:
			out = []byte("+OK\r\n")
		}
		if _, err := c.Write(out); err != nil || last {
			return
		}
	}
}

// readCommand reads one client command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 64 {
		return nil, fmt.Errorf("bad command length %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil || l < 0 || l > 1<<16 {
			return nil, fmt.Errorf("bad argument header %q", h)
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:l])
	}
	return cmd, nil
}
