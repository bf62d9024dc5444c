package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxFlows bounds the number of sockets send opens.
const maxFlows = 4096

// parseFlags parses args into fs. -h prints the flags and exits 0; any other
// error is a one-line usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		os.Exit(0)
	}
	if err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return badFlag("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// parseAddrs parses a comma-separated list of host:port ([v6]:port).
func parseAddrs(name, s string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(f)
		if err != nil {
			return nil, badFlag("--%s %q: want IP:PORT or [IPv6]:PORT", name, f)
		}
		out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())) // 4-in-6 goes out as plain IPv4
	}
	if len(out) == 0 {
		return nil, badFlag("--%s is required", name)
	}
	return out, nil
}

// SendFlow is what send reports per flow (per source port).
type SendFlow struct {
	Sent    uint64 `json:"sent"` // datagrams, summed over destinations
	FirstNs int64  `json:"first_ns"`
	LastNs  int64  `json:"last_ns"`
	// Windows counts the flow's packets per window of --window, keyed by
	// the window's index floor(unix ns / window); a packet sent to several
	// destinations counts once. Only with --window.
	Windows map[string]uint64 `json:"windows,omitempty"`
	// TimesUs is the send time of each of the flow's packets, in µs after
	// FirstNs. Only with --times (for tests that replay an ideal limiter
	// over the actual send times).
	TimesUs []int64 `json:"times_us,omitempty"`
}

// SendResult is send's JSON output.
type SendResult struct {
	Flows    map[string]*SendFlow `json:"flows"` // by source port
	Sent     uint64               `json:"sent"`
	Errors   uint64               `json:"errors"`
	Seconds  float64              `json:"seconds"`
	PPS      float64              `json:"pps_per_flow"`
	Dsts     []string             `json:"dsts"`
	WindowNs int64                `json:"window_ns,omitempty"`
}

func runSend(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	dst := fs.String("dst", "", "destination(s) IP:PORT[,IP:PORT...]: every flow sends each packet to each destination")
	src := fs.String("src", "", "source IP to bind (default: any)")
	nflows := fs.Int("flows", 1, fmt.Sprintf("number of flows (source ports), 1..%d", maxFlows))
	sport := fs.Int("sport", 10000, "first source port; flow i uses sport+i")
	pps := fs.Float64("pps", 100, "packets per second per flow and destination")
	dur := fs.Duration("duration", 3*time.Second, "how long to send (max 10m)")
	count := fs.Uint64("count", 0, "stop after this many packets per flow and destination (0 = only --duration)")
	size := fs.Int("size", 64, "UDP payload bytes (0..1400)")
	window := fs.Duration("window", 0, "also count packets per flow per window of this length, aligned to the Unix epoch")
	times := fs.Bool("times", false, "also report each packet's send time per flow (µs after the flow's first)")
	align := fs.Duration("align", 0, "start sending at the next multiple of this since the Unix epoch (e.g. 1s: on a second boundary; max 1m)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	dsts, err := parseAddrs("dst", *dst)
	if err != nil {
		return nil, err
	}
	if err := boundDuration("duration", *dur); err != nil {
		return nil, err
	}
	switch {
	case *nflows < 1 || *nflows > maxFlows:
		return nil, badFlag("--flows %d: must be 1..%d", *nflows, maxFlows)
	case *sport < 1 || *sport+*nflows-1 > 65535:
		return nil, badFlag("--sport %d with %d flows: ports must stay within 1..65535", *sport, *nflows)
	case !(*pps > 0 && *pps <= 1e6):
		return nil, badFlag("--pps %v: must be > 0 and <= 1000000", *pps)
	case *size < 0 || *size > 1400:
		return nil, badFlag("--size %d: must be 0..1400", *size)
	case *window < 0:
		return nil, badFlag("--window %v: must be >= 0", *window)
	case *align < 0 || *align > time.Minute:
		return nil, badFlag("--align %v: must be 0..1m", *align)
	case *times && float64(*nflows)**pps*dur.Seconds() > 10e6:
		return nil, badFlag("--times keeps 8 bytes per packet: at most 10 million packets (flows × pps × duration)")
	}
	var srcIP netip.Addr
	if *src != "" {
		if srcIP, err = netip.ParseAddr(*src); err != nil {
			return nil, badFlag("--src %q: not an IP address", *src)
		}
	}

	conns := make([]*net.UDPConn, *nflows)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		la := &net.UDPAddr{Port: *sport + i}
		if srcIP.IsValid() {
			la.IP = srcIP.AsSlice()
		}
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return nil, fmt.Errorf("flow %d: %w", i, err)
		}
		conns[i] = c
	}

	res := &SendResult{Flows: make(map[string]*SendFlow, *nflows), PPS: *pps, WindowNs: int64(*window)}
	for _, d := range dsts {
		res.Dsts = append(res.Dsts, d.String())
	}
	stats := make([]SendFlow, *nflows)
	var wins []map[int64]uint64
	if *window > 0 {
		wins = make([]map[int64]uint64, *nflows)
		for i := range wins {
			wins[i] = make(map[int64]uint64)
		}
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}

	// Packet i (over all flows) is due at start + i*interval and belongs to
	// flow i % flows: flows are interleaved packet by packet. A late sender
	// catches up in a burst rather than drifting, so each flow's average
	// rate is exactly --pps over the run.
	interval := time.Duration(float64(time.Second) / (*pps * float64(*nflows)))
	if interval <= 0 {
		interval = 1
	}
	total := uint64(0)
	if *count > 0 {
		total = *count * uint64(*nflows)
	}
	start := time.Now()
	if *align > 0 {
		// The next multiple of align since the epoch, as an offset from
		// now so that start keeps its monotonic reading.
		ns := start.UnixNano()
		a := int64(*align)
		start = start.Add(time.Duration((ns/a+1)*a - ns))
	}
	timer := time.NewTimer(time.Until(start))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	end := start.Add(*dur)
	var i uint64
loop:
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		// Send everything that is due now.
		for ; total == 0 || i < total; i++ {
			due := start.Add(time.Duration(i) * interval)
			if due.After(now) {
				break
			}
			if !due.Before(end) {
				break loop
			}
			f := int(i % uint64(*nflows))
			ns := time.Now().UnixNano()
			st := &stats[f]
			for _, d := range dsts {
				if _, err := conns[f].WriteToUDPAddrPort(payload, d); err != nil {
					res.Errors++
					continue
				}
				if st.Sent == 0 {
					st.FirstNs = ns
				}
				st.Sent++
				st.LastNs = ns
			}
			if wins != nil {
				wins[f][ns/int64(*window)]++
			}
			if *times && st.Sent > 0 {
				st.TimesUs = append(st.TimesUs, (ns-st.FirstNs)/1000)
			}
		}
		if total > 0 && i >= total {
			break
		}
		next := start.Add(time.Duration(i) * interval)
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			break loop
		case <-timer.C:
		}
	}
	res.Seconds = time.Since(start).Seconds()
	for f := range stats {
		st := stats[f]
		if wins != nil {
			st.Windows = make(map[string]uint64, len(wins[f]))
			for k, v := range wins[f] {
				st.Windows[strconv.FormatInt(k, 10)] = v
			}
		}
		res.Flows[strconv.Itoa(*sport+f)] = &st
		res.Sent += st.Sent
	}
	return res, nil
}
