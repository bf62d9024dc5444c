package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// ConnectResult is the JSON output of tcp-connect: each attempt's outcome,
// and what the connections sent.
type ConnectResult struct {
	Attempts  int     `json:"attempts"`
	Connected int     `json:"connected"`
	Failed    int     `json:"failed"`
	AtNs      []int64 `json:"at_ns"` // when each attempt started (wall clock)
	OK        []bool  `json:"ok"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"` // of the transfers, once connected
	// Rates: each transfer's bytes per second (connected to closed).
	Rates  []float64 `json:"rates"`
	Errors []string  `json:"errors,omitempty"`
}

// runTCPConnect opens --count connections from --src to --dst, one every
// --interval, each given --timeout to connect; a connection that opens
// sends --bytes and closes.
func runTCPConnect(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("tcp-connect", flag.ContinueOnError)
	dst := fs.String("dst", "", "TCP destination IP:PORT or [IPv6]:PORT")
	src := fs.String("src", "", "local address to connect from (default: the route's)")
	count := fs.Int("count", 10, "connections to attempt (max 10000)")
	interval := fs.Duration("interval", time.Second, "between attempts")
	timeout := fs.Duration("timeout", 500*time.Millisecond, "each attempt's connect timeout")
	nbytes := fs.Int64("bytes", 0, "bytes each connection sends (max 1 GiB)")
	dur := fs.Duration("duration", 60*time.Second, "give up after this long (max 10m)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *dst == "" {
		return nil, badFlag("--dst is required")
	}
	if *count < 1 || *count > 10000 || *interval < 0 || *timeout <= 0 || *nbytes < 0 || *nbytes > 1<<30 {
		return nil, badFlag("--count 1..10000, --interval >= 0, --timeout > 0, --bytes 0..1073741824")
	}
	if err := boundDuration("duration", *dur); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(*dur)
	var local net.Addr
	if *src != "" {
		a, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(*src, "0"))
		if err != nil {
			return nil, badFlag("--src %s: %v", *src, err)
		}
		local = a
	}
	res := &ConnectResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *count && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		if d := time.Until(start.Add(time.Duration(i) * *interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		at := time.Now()
		d := net.Dialer{Timeout: *timeout, LocalAddr: local}
		c, err := d.DialContext(ctx, "tcp", *dst)
		res.Attempts++
		res.AtNs = append(res.AtNs, at.UnixNano())
		res.OK = append(res.OK, err == nil)
		if err != nil {
			res.Failed++
			res.Errors = append(res.Errors, err.Error())
			continue
		}
		res.Connected++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetDeadline(deadline)
			t0 := time.Now()
			n, err := io.Copy(c, io.LimitReader(rand.NewChaCha8([32]byte{'c'}), *nbytes))
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			if err == nil {
				_, err = io.Copy(io.Discard, c) // the peer read it all
			}
			mu.Lock()
			defer mu.Unlock()
			res.Bytes += n
			d := time.Since(t0).Seconds()
			res.Seconds += d
			if d > 0 {
				res.Rates = append(res.Rates, float64(n)/d)
			}
			if err != nil {
				res.Errors = append(res.Errors, err.Error())
			}
		}()
	}
	wg.Wait()
	return res, nil
}

// AcceptResult is the JSON output of tcp-accept.
type AcceptResult struct {
	Accepted int              `json:"accepted"`
	ByPeer   map[string]int   `json:"by_peer"` // connections per peer address
	Bytes    map[string]int64 `json:"bytes"`   // bytes read per peer address
}

// runTCPAccept accepts connections until --duration or a signal, reads
// each to EOF and closes it, and reports them by peer address.
func runTCPAccept(ctx context.Context, args []string) (any, error) {
	ln, listen, dur, err := listenTCP("tcp-accept", "stop after this long (max 10m)", args)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	fmt.Fprintf(os.Stderr, "psend tcp-accept: listening on %s\n", listen)
	res := &AcceptResult{ByPeer: map[string]int{}, Bytes: map[string]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		mu.Lock()
		res.Accepted++
		res.ByPeer[host]++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stopc := context.AfterFunc(ctx, func() { c.Close() })
			defer stopc()
			n, _ := io.Copy(io.Discard, c)
			mu.Lock()
			res.Bytes[host] += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res, nil
}
