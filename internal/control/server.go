package control

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/packetshaper/packetshaper/internal/heap"
)

// DefaultDir is where the default socket paths are.
const DefaultDir = "/run/packetshaper"

// DefaultPath is the default socket path of a shaper serving queues (a
// number or a range "N-M", as --queue takes them): DefaultDir/
// packetshaper.sock for queue 0, DefaultDir/packetshaper-N.sock or
// packetshaper-N-M.sock for others, so that processes serving different
// queues do not collide.
func DefaultPath(queues string) string {
	if queues == "0" {
		return filepath.Join(DefaultDir, "packetshaper.sock")
	}
	return filepath.Join(DefaultDir, "packetshaper-"+queues+".sock")
}

// ErrInUse is matched (errors.Is) by Listen's error when another process
// answers on the path.
var ErrInUse = errors.New("in use by another process")

// ErrNotSocket is matched (errors.Is) by Listen's error when the path is
// taken by something that is not a socket.
var ErrNotSocket = errors.New("exists and is not a socket")

// ListenError is why Listen could not make the control socket at Path: Op
// what it was doing ("" for making the socket itself), Err the cause
// (ErrInUse, ErrNotSocket, an errno, a *fs.PathError). Its text is one
// line, "[OP ]PATH: CAUSE", without a "control socket" prefix: the caller
// says what the path is for (the daemon: "--control-socket: ").
type ListenError struct {
	Path string
	Op   string
	Err  error
}

func (e *ListenError) Error() string {
	if e.Op != "" {
		return e.Op + " " + e.Path + ": " + e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *ListenError) Unwrap() error { return e.Err }

// Listen creates the control socket at path, mode 0600, owned by the
// process's user (root), creating its directory (mode 0755) if missing. A
// socket file left by a process that died (nobody answers on it) is
// replaced; a live one is not (ErrInUse), nor anything that is not a
// socket (ErrNotSocket). Its errors are *ListenError, one line.
func Listen(path string) (*net.UnixListener, error) {
	fail := func(op string, err error) (*net.UnixListener, error) {
		return nil, &ListenError{Path: path, Op: op, Err: err}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fail("creating the directory of", unwrapOp(err))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fail("", ErrNotSocket)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return fail("", ErrInUse)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fail("", unwrapOp(err))
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail("removing the stale", unwrapOp(err))
		}
	}
	// The socket is created with the umask's mode: mask everything but
	// the owner's read and write, so that it is never open to others,
	// even for an instant. (Only the daemon's setup runs now: nothing
	// else creates files meanwhile.)
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fail("", ErrInUse)
		}
		return fail("", unwrapOp(err))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fail("setting the mode of", unwrapOp(err))
	}
	return ln, nil
}

// unwrapOp drops net.OpError's and os.PathError's words around the cause,
// for messages that already name the path.
func unwrapOp(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Handler answers the requests. Its methods are called from the server's
// goroutines, possibly several at once.
type Handler interface {
	// Status describes the shaper now.
	Status() Status
	// Flows calls emit for each flow held (only rule's, if rule is not
	// empty), in any order, until emit returns an error, which it
	// returns. The Flow is emit's only during the call. ctx is cancelled
	// when the listing is abandoned. An unknown rule is an error.
	Flows(ctx context.Context, rule string, emit func(*Flow) error) error
}

// Limits of the server.
const (
	maxConns     = 8                // connections served at once; more are refused
	maxRequest   = 4096             // bytes of a request line
	readTimeout  = 5 * time.Second  // for the request line
	writeTimeout = 30 * time.Second // for each write of answers
	writeBuffer  = 64 << 10
)

// Serve answers connections on ln until ctx is cancelled or ln fails, then
// closes ln and waits for the connections being served (their listings are
// cancelled). logf, if not nil, gets a line for each answer that could not
// be sent (errors that the client is told are its business).
func Serve(ctx context.Context, ln net.Listener, h Handler, logf func(format string, args ...any)) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	sem := make(chan struct{}, maxConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			writeAnswer(c, answer{Error: ptr("busy: too many control connections at once")})
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer c.Close()
			if err := serveConn(ctx, c, h); err != nil {
				logf("control socket: %v", err)
			}
		}()
	}
}

func ptr[T any](v T) *T { return &v }

// writeAnswer writes one answer line, bounded in time.
func writeAnswer(c net.Conn, a answer) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keys read "10.0.0.1 > 10.0.0.2"
	if err := enc.Encode(a); err != nil {
		return err
	}
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Write(b.Bytes())
	return err
}

// serveConn answers one connection's request. Its error is for the log:
// the client has been told, or is gone.
func serveConn(ctx context.Context, c net.Conn, h Handler) error {
	c.SetReadDeadline(time.Now().Add(readTimeout))
	line, err := bufio.NewReaderSize(c, maxRequest).ReadSlice('\n')
	if perr := checkPeer(c); perr != nil {
		// Told after its request is read, so that it reads the answer
		// rather than fail to send.
		writeAnswer(c, answer{Error: ptr(perr.Error())})
		return nil
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			writeAnswer(c, answer{Error: ptr("request line too long")})
		}
		return nil // a client that sent nothing usable: not worth a log line
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return writeAnswer(c, answer{Error: ptr("bad request: " + err.Error())})
	}
	if err := req.check(); err != nil {
		return writeAnswer(c, answer{Error: ptr(err.Error())})
	}
	if req.Cmd == CmdStatus {
		s := h.Status()
		return writeAnswer(c, answer{Status: &s})
	}
	return serveFlows(ctx, c, h, &req)
}

// deadlineWriter sets a write deadline before each write to the
// connection (the buffered writer's, a few per listing).
type deadlineWriter struct{ c net.Conn }

func (w deadlineWriter) Write(b []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	return w.c.Write(b)
}

func serveFlows(ctx context.Context, c net.Conn, h Handler, req *Request) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	bw := bufio.NewWriterSize(deadlineWriter{c}, writeBuffer)
	var end End
	var line []byte
	var writeErr error // the client is gone (or stuck)
	send := func(f *Flow) error {
		end.Flows++
		line = append(line[:0], flowPrefix...)
		line = append(f.AppendJSON(line), flowSuffix...)
		_, writeErr = bw.Write(line)
		return writeErr
	}
	var top *topFlows
	emit := send
	if req.Top > 0 {
		top = newTop(req.Top, req.Sort)
		emit = func(f *Flow) error { top.add(f); return nil }
	}
	err := h.Flows(ctx, req.Rule, func(f *Flow) error {
		end.Listed++
		return emit(f)
	})
	if err == nil && top != nil {
		for _, f := range top.sorted() {
			if err = send(f); err != nil {
				break
			}
		}
	}
	if err != nil {
		// The client is told (a rule it misspelt, a stop): nothing to
		// log, unless it cannot be told.
		if writeErr != nil {
			return nil // a client that left mid-listing (| head): its business
		}
		bw.Flush()
		if e := writeAnswer(c, answer{Error: ptr(err.Error())}); e != nil && ctx.Err() == nil {
			return fmt.Errorf("flows: %w (and the client could not be told: %w)", err, unwrapOp(e))
		}
		return nil
	}
	end.Secs = time.Since(t0).Seconds()
	b, _ := json.Marshal(answer{End: &end})
	if _, err := bw.Write(append(b, '\n')); err != nil {
		return nil // gone at the last moment
	}
	bw.Flush()
	return nil
}

// topFlows keeps the n flows first in an order: a heap whose root is the
// last of them.
type topFlows struct {
	n     int
	first func(a, b *Flow) int // < 0: a comes before b
	h     heap.Heap[*Flow]
}

func newTop(n int, sort string) *topFlows {
	t := &topFlows{n: n, first: FlowOrder(sort)}
	t.h = heap.New(func(a, b **Flow) bool { return t.first(*a, *b) > 0 }, 0) // the last at the root
	return t
}

// tie orders flows equal in counts by queue, rule and key.
func tie(a, b *Flow) int {
	return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
}

func (t *topFlows) add(f *Flow) {
	if t.h.Len() < t.n {
		c := *f
		t.h.Push(&c)
		return
	}
	if t.first(f, *t.h.Top()) < 0 {
		**t.h.Top() = *f
		t.h.Fix(0)
	}
}

func (t *topFlows) sorted() []*Flow {
	h := t.h.Items()
	slices.SortFunc(h, t.first)
	return h
}
