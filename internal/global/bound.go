package global

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// A store's replies are bounded here, on the connection, before go-redis
// reads them: go-redis (v9) has no reply size limit of its own and sizes
// its allocations by the reply's header (a "*9223372036854775807" array
// panics in makeslice; a "*4000000000" one exhausts memory, which no
// recover catches; and its cluster client reads some replies in goroutines
// of its own). So every connection go-redis makes comes from
// boundedDialer, whose net.Conn (respGuard) follows the RESP2 stream it
// reads and fails the read, and the connection, at the first header that
// declares more than these bounds, or at anything that is not RESP2
// (Options.Protocol is 2). A refused reply is an error like a timeout: the
// ask fails, the rules fall back, go-redis drops the connection.
const (
	// MaxReplyElements bounds the elements of one reply, nested
	// aggregates counted together (the lease script's reply has 7; CLUSTER
	// SLOTS of a 16 384-range cluster with replicas some 200 000).
	MaxReplyElements = 1 << 20
	// MaxReplyBytes bounds the bulk strings' bytes in one reply, and
	// MaxBulk one bulk string.
	MaxReplyBytes = 8 << 20
	MaxBulk       = 1 << 20
	// MaxLine bounds a simple string's or an error's line.
	MaxLine = 64 << 10
	// maxDepth bounds how deep aggregates nest in one reply.
	maxDepth = 8
)

// ReplyError is a reply respGuard refused: its text says what it declared.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "global: store reply refused: " + e.Msg }

// boundedDialer is the go-redis Dialer of every connection to the store:
// TCP (and TLS with tlsCfg, as go-redis's own dialer would, ServerName the
// address's host if not set), under a respGuard.
func boundedDialer(tlsCfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tlsCfg != nil {
			cfg := tlsCfg.Clone()
			if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
				if host, _, err := net.SplitHostPort(addr); err == nil {
					cfg.ServerName = host
				}
			}
			tc := tls.Client(c, cfg)
			hctx, cancel := context.WithTimeout(ctx, timeout)
			err := tc.HandshakeContext(hctx)
			cancel()
			if err != nil {
				c.Close()
				return nil, err
			}
			c = tc
		}
		return newRespGuard(c, respBounds{MaxReplyElements, MaxReplyBytes, MaxBulk, MaxLine}), nil
	}
}

// respBounds are a respGuard's bounds (the constants above; the tests give
// smaller or larger ones).
type respBounds struct {
	elems, bytes, bulk, line int64
}

// respGuard is a net.Conn that checks the RESP2 replies read through it.
// It keeps only counters and a stack of maxDepth counts: it does not copy
// the stream.
type respGuard struct {
	net.Conn
	b   respBounds
	err atomic.Pointer[ReplyError] // set once a reply is refused

	st       uint8 // stType, stLine, stBulk
	typ      byte
	hdr      [24]byte // a length header's digits
	hdrN     int
	lineN    int64
	bulkLeft int64
	stack    [maxDepth]int64 // elements still to come of each open aggregate
	depth    int
	elems    int64 // of the reply being read
	bytes    int64
}

const (
	stType = iota // at a reply's type byte
	stLine        // in its first line
	stBulk        // in a bulk string's payload and CRLF
)

func newRespGuard(c net.Conn, b respBounds) *respGuard { return &respGuard{Conn: c, b: b} }

func (g *respGuard) Read(p []byte) (int, error) {
	if e := g.err.Load(); e != nil {
		return 0, e
	}
	n, err := g.Conn.Read(p)
	if e := g.scan(p[:n]); e != nil {
		g.err.Store(e)
		g.Conn.Close()
		return 0, e
	}
	return n, err
}

// Write fails once a reply was refused: the connection is closed, and
// whatever go-redis does with it next fails at once.
func (g *respGuard) Write(p []byte) (int, error) {
	if e := g.err.Load(); e != nil {
		return 0, e
	}
	return g.Conn.Write(p)
}

// scan follows the stream through p.
func (g *respGuard) scan(p []byte) *ReplyError {
	for len(p) > 0 {
		switch g.st {
		case stBulk:
			k := min(g.bulkLeft, int64(len(p)))
			p = p[k:]
			if g.bulkLeft -= k; g.bulkLeft == 0 {
				g.done()
			}
		case stType:
			g.typ = p[0]
			p = p[1:]
			switch g.typ {
			case '+', '-', ':', '$', '*':
			default:
				return &ReplyError{fmt.Sprintf("type byte %q is not RESP2", g.typ)}
			}
			g.st, g.hdrN, g.lineN = stLine, 0, 0
		case stLine:
			j := bytes.IndexByte(p, '\n')
			seg := p
			if j >= 0 {
				seg = p[:j]
			}
			if g.lineN += int64(len(seg)); g.lineN > g.b.line {
				return &ReplyError{fmt.Sprintf("a line longer than %d bytes", g.b.line)}
			}
			if g.typ == '$' || g.typ == '*' {
				if g.hdrN+len(seg) > len(g.hdr) {
					return &ReplyError{fmt.Sprintf("a %c header longer than %d bytes", g.typ, len(g.hdr))}
				}
				g.hdrN += copy(g.hdr[g.hdrN:], seg)
			}
			if j < 0 {
				return nil
			}
			p = p[j+1:]
			if err := g.lineEnd(); err != nil {
				return err
			}
		}
	}
	return nil
}

// lineEnd acts on a reply's first line, read whole.
func (g *respGuard) lineEnd() *ReplyError {
	if g.typ != '$' && g.typ != '*' {
		g.done()
		return nil
	}
	h := bytes.TrimSuffix(g.hdr[:g.hdrN], []byte("\r"))
	n, err := strconv.ParseInt(string(h), 10, 64)
	switch {
	case err != nil:
		return &ReplyError{fmt.Sprintf("a %c header %q that is not a length", g.typ, h)}
	case n == -1: // null
		g.done()
		return nil
	case n < 0:
		return &ReplyError{fmt.Sprintf("a %c header of length %d", g.typ, n)}
	}
	if g.typ == '$' {
		if n > g.b.bulk || n > g.b.bytes-g.bytes {
			return &ReplyError{fmt.Sprintf("a bulk string of %d bytes (bound %d, %d a reply)", n, g.b.bulk, g.b.bytes)}
		}
		g.bytes += n
		g.st, g.bulkLeft = stBulk, n+2
		return nil
	}
	if n > g.b.elems-g.elems {
		return &ReplyError{fmt.Sprintf("an array of %d elements (bound %d a reply)", n, g.b.elems)}
	}
	g.elems += n
	if n == 0 {
		g.done()
		return nil
	}
	if g.depth == maxDepth {
		return &ReplyError{fmt.Sprintf("arrays nested deeper than %d", maxDepth)}
	}
	g.stack[g.depth] = n
	g.depth++
	g.st = stType
	return nil
}

// done ends one element: the aggregates it completes end too, and with
// the outermost the reply, whose counts start again.
func (g *respGuard) done() {
	g.st = stType
	for g.depth > 0 {
		if g.stack[g.depth-1]--; g.stack[g.depth-1] > 0 {
			return
		}
		g.depth--
	}
	g.elems, g.bytes = 0, 0
}
