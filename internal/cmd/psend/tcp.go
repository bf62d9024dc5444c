package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"
)

// TCPResult is the JSON output of tcp-serve and tcp-send.
type TCPResult struct {
	Bytes   int64   `json:"bytes"`
	SHA256  string  `json:"sha256"`
	Seconds float64 `json:"seconds"`
	Peer    string  `json:"peer"`
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// listenTCP parses a TCP server mode's flags (--listen, --duration, its
// help durHelp) from args and listens: the listener, the address as given
// and the duration.
func listenTCP(mode, durHelp string, args []string) (net.Listener, string, time.Duration, error) {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	listen := fs.String("listen", ":9100", "TCP address to listen on")
	dur := fs.Duration("duration", 30*time.Second, durHelp)
	if err := parseFlags(fs, args); err != nil {
		return nil, "", 0, err
	}
	if err := boundDuration("duration", *dur); err != nil {
		return nil, "", 0, err
	}
	ln, err := net.Listen("tcp", *listen)
	return ln, *listen, *dur, err
}

// runTCPServe accepts one connection, reads it to EOF and reports what it
// read.
func runTCPServe(ctx context.Context, args []string) (any, error) {
	ln, listen, dur, err := listenTCP("tcp-serve", "give up after this long (max 10m)", args)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	deadline := time.Now().Add(dur)
	_ = ln.(*net.TCPListener).SetDeadline(deadline)
	fmt.Fprintf(os.Stderr, "psend tcp-serve: listening on %s\n", listen)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	defer closeOnDone(ctx, c, deadline)()
	start := time.Now()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		return nil, fmt.Errorf("read after %d bytes: %w", n, err)
	}
	return &TCPResult{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil)), Seconds: time.Since(start).Seconds(), Peer: c.RemoteAddr().String()}, nil
}

// runTCPSend connects, writes --bytes deterministic pseudo-random bytes and
// closes.
func runTCPSend(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("tcp-send", flag.ContinueOnError)
	dst := fs.String("dst", "", "TCP destination IP:PORT or [IPv6]:PORT")
	nbytes := fs.Int64("bytes", 1<<20, "bytes to send (max 1 GiB)")
	dur := fs.Duration("duration", 30*time.Second, "give up after this long (max 10m)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *dst == "" {
		return nil, badFlag("--dst is required")
	}
	if *nbytes < 0 || *nbytes > 1<<30 {
		return nil, badFlag("--bytes %d: must be 0..1073741824", *nbytes)
	}
	if err := boundDuration("duration", *dur); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(*dur)
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", *dst)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer closeOnDone(ctx, c, deadline)()
	start := time.Now()
	h := sha256.New()
	src := io.LimitReader(rand.NewChaCha8([32]byte{'p', 's', 'e', 'n', 'd'}), *nbytes)
	n, err := io.Copy(io.MultiWriter(c, h), src)
	if err != nil {
		return nil, fmt.Errorf("write after %d bytes: %w", n, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return nil, err
	}
	// Wait for the peer to close: it has read everything.
	_, _ = io.Copy(io.Discard, c)
	return &TCPResult{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil)), Seconds: time.Since(start).Seconds(), Peer: c.RemoteAddr().String()}, nil
}

// closeOnDone gives c deadline and closes it when ctx is done (a signal);
// the function it returns stops the latter.
func closeOnDone(ctx context.Context, c net.Conn, deadline time.Time) (stop func() bool) {
	_ = c.SetDeadline(deadline)
	return context.AfterFunc(ctx, func() { c.Close() })
}
