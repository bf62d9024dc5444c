package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RecvResult is recv's JSON output.
type RecvResult struct {
	// Received counts datagrams per listening port, then per source port.
	Received map[string]map[string]uint64 `json:"received"`
	Total    uint64                       `json:"total"`
	FirstNs  int64                        `json:"first_ns,omitempty"` // first datagram, any port
	LastNs   int64                        `json:"last_ns,omitempty"`  // last datagram, any port
	Seconds  float64                      `json:"seconds"`
	Reason   string                       `json:"stopped_by"` // "duration", "idle" or "signal"
	// With --times, per listening port and source port: when each
	// datagram was read (ns since the epoch, in arrival order), and the
	// kernel's receive timestamp of each (SO_TIMESTAMPNS: when it entered
	// the network stack, before netfilter; 0 if none). At most maxTimes
	// datagrams in all.
	TimesNs map[string]map[string][]int64 `json:"times_ns,omitempty"`
	RxNs    map[string]map[string][]int64 `json:"rx_ns,omitempty"`
	// Seqs: each datagram's first 8 bytes, big-endian (send --seq numbers
	// each flow's packets so), or -1 for a shorter one.
	Seqs map[string]map[string][]int64 `json:"seqs,omitempty"`
	// Bins counts datagrams (all ports) per --bins interval: the key is
	// the interval's start, ns since the Unix epoch.
	Bins map[string]uint64 `json:"bins,omitempty"`
	// Sizes counts datagrams (all ports) by their UDP payload length.
	Sizes map[string]uint64 `json:"sizes,omitempty"`
}

// maxTimes bounds what recv --times keeps: 16 bytes per datagram.
const maxTimes = 2_000_000

// portCount is one listener's tally; each listener goroutine owns its own.
type portCount struct {
	bySrc           map[uint16]uint64
	total           uint64
	firstNs, lastNs int64
	times, rx, seqs map[uint16][]int64 // --times
	bins            map[int64]uint64
	sizes           map[int]uint64
}

func runRecv(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("recv", flag.ContinueOnError)
	listen := fs.String("listen", ":9000", "UDP address(es) to listen on, [IP]:PORT[,...]; an empty IP listens on all (IPv4 and IPv6)")
	dur := fs.Duration("duration", 10*time.Second, "stop after this long (max 10m)")
	idle := fs.Duration("idle", 0, "stop this long after the last datagram, once one arrived (0 = only --duration)")
	times := fs.Bool("times", false, "also report when each datagram arrived and the kernel's receive timestamp of each (times_ns, rx_ns per port and source port; at most 2 million)")
	bins := fs.Duration("bins", 0, "also count datagrams per interval of this length, aligned to the Unix epoch (0 = no)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := boundDuration("duration", *dur); err != nil {
		return nil, err
	}
	if *idle < 0 {
		return nil, badFlag("--idle %v: must be >= 0", *idle)
	}
	if *bins < 0 || *bins > 0 && *bins < time.Millisecond {
		return nil, badFlag("--bins %v: must be 0 or at least 1ms", *bins)
	}
	binNs := int64(*bins)
	var conns []*net.UDPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var ports []string
	rcvbuf := 0
	for _, a := range splitList(*listen) {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil || ua.Port == 0 {
			return nil, badFlag("--listen %q: want [IP]:PORT", a)
		}
		c, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, err
		}
		// A large buffer so that a burst is not lost in the socket (the
		// tests count every datagram); SO_RCVBUFFORCE as root.
		rcvbuf = setRcvBuf(c, 32<<20)
		if *times {
			if err := enableRxTimestamps(c); err != nil {
				return nil, fmt.Errorf("SO_TIMESTAMPNS: %w", err)
			}
		}
		conns = append(conns, c)
		ports = append(ports, strconv.Itoa(ua.Port))
	}
	if len(conns) == 0 {
		return nil, badFlag("--listen is required")
	}
	fmt.Fprintf(os.Stderr, "psend recv: listening on %s (receive buffer %d bytes)\n", *listen, rcvbuf)

	start := time.Now()
	end := start.Add(*dur)
	counts := make([]portCount, len(conns))
	var kept atomic.Int64 // datagrams whose times are kept
	var wg sync.WaitGroup
	var mu sync.Mutex // guards lastAny
	var lastAny time.Time
	done := make(chan struct{})
	for i, c := range conns {
		counts[i].bySrc = make(map[uint16]uint64)
		if *times {
			counts[i].times, counts[i].rx, counts[i].seqs = make(map[uint16][]int64), make(map[uint16][]int64), make(map[uint16][]int64)
		}
		counts[i].bins = make(map[int64]uint64)
		counts[i].sizes = make(map[int]uint64)
		wg.Add(1)
		go func(c *net.UDPConn, pc *portCount) {
			defer wg.Done()
			buf := make([]byte, 65536)
			oob := make([]byte, 128)
			for {
				select {
				case <-done:
					return
				default:
				}
				// Short deadlines so that a stop is noticed promptly.
				_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						continue
					}
					return // closed
				}
				ns := time.Now().UnixNano()
				if pc.times != nil && kept.Add(1) <= maxTimes {
					pc.times[from.Port()] = append(pc.times[from.Port()], ns)
					pc.rx[from.Port()] = append(pc.rx[from.Port()], rxTimestamp(oob[:oobn]))
					seq := int64(-1)
					if n >= 8 {
						seq = int64(binary.BigEndian.Uint64(buf))
					}
					pc.seqs[from.Port()] = append(pc.seqs[from.Port()], seq)
				}
				pc.bySrc[from.Port()]++
				pc.sizes[n]++
				pc.total++
				if binNs > 0 {
					pc.bins[ns/binNs*binNs]++
				}
				if pc.firstNs == 0 {
					pc.firstNs = ns
				}
				pc.lastNs = ns
				mu.Lock()
				lastAny = time.Unix(0, ns)
				mu.Unlock()
			}
		}(c, &counts[i])
	}

	reason := "duration"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			reason = "signal"
			break wait
		case now := <-tick.C:
			if !now.Before(end) {
				break wait
			}
			if *idle > 0 {
				mu.Lock()
				l := lastAny
				mu.Unlock()
				if !l.IsZero() && now.Sub(l) >= *idle {
					reason = "idle"
					break wait
				}
			}
		}
	}
	close(done)
	wg.Wait()

	res := &RecvResult{Received: make(map[string]map[string]uint64), Reason: reason, Seconds: time.Since(start).Seconds()}
	if *times {
		res.TimesNs, res.RxNs, res.Seqs = map[string]map[string][]int64{}, map[string]map[string][]int64{}, map[string]map[string][]int64{}
	}
	for i, pc := range counts {
		if pc.times != nil {
			tm, rm, sm := map[string][]int64{}, map[string][]int64{}, map[string][]int64{}
			for sp, ts := range pc.times {
				tm[strconv.Itoa(int(sp))] = ts
				rm[strconv.Itoa(int(sp))] = pc.rx[sp]
				sm[strconv.Itoa(int(sp))] = pc.seqs[sp]
			}
			res.TimesNs[ports[i]], res.RxNs[ports[i]], res.Seqs[ports[i]] = tm, rm, sm
		}
		m := res.Received[ports[i]]
		if m == nil {
			m = make(map[string]uint64)
			res.Received[ports[i]] = m
		}
		for sp, n := range pc.bySrc {
			m[strconv.Itoa(int(sp))] += n
		}
		res.Total += pc.total
		for b, n := range pc.bins {
			if res.Bins == nil {
				res.Bins = make(map[string]uint64)
			}
			res.Bins[strconv.FormatInt(b, 10)] += n
		}
		for sz, n := range pc.sizes {
			if res.Sizes == nil {
				res.Sizes = make(map[string]uint64)
			}
			res.Sizes[strconv.Itoa(sz)] += n
		}
		if pc.firstNs != 0 && (res.FirstNs == 0 || pc.firstNs < res.FirstNs) {
			res.FirstNs = pc.firstNs
		}
		if pc.lastNs > res.LastNs {
			res.LastNs = pc.lastNs
		}
	}
	return res, nil
}
