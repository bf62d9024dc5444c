package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxFlows bounds the number of sockets send opens.
const maxFlows = 4096

// maxBatch bounds --batch, the datagrams one sendmmsg call carries.
const maxBatch = 1024

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
	// over the actual send times). Unpaced, the packets of one sendmmsg
	// batch share the batch's time.
	TimesUs []int64 `json:"times_us,omitempty"`
}

// SendResult is the JSON output of send and send6x.
type SendResult struct {
	Flows   map[string]*SendFlow `json:"flows"` // by source port
	Sent    uint64               `json:"sent"`
	Errors  uint64               `json:"errors"` // datagrams that failed to go out
	Seconds float64              `json:"seconds"`
	// AchievedPPS is Sent / Seconds: every flow and destination together.
	AchievedPPS float64  `json:"achieved_pps"`
	PPS         float64  `json:"pps_per_flow"` // as asked; 0: unpaced
	Dsts        []string `json:"dsts"`
	WindowNs    int64    `json:"window_ns,omitempty"`
	// send6x only: the Destination Options headers in front of the UDP
	// header (DstOptLen bytes each) and their total length.
	DstOpts   int `json:"dstopts,omitempty"`
	DstOptLen int `json:"dstopt_len,omitempty"`
	ExtBytes  int `json:"ext_bytes,omitempty"`
}

// sendOpts are the flags send and send6x share: which flows, how fast, for
// how long.
// maxUDPPayload is the largest UDP payload of an IPv4 datagram (65535 less
// the IPv4 and UDP headers), and so of --size.
const maxUDPPayload = 65535 - 20 - 8

type sendOpts struct {
	dst, src string
	flows    int
	sport    int
	pps      float64 // 0: unpaced
	dur      time.Duration
	count    uint64 // per flow and destination; 0: only dur
	size     int
	window   time.Duration
	times    bool
	seq      bool
	align    time.Duration
	batch    int
	gso      int    // send --gso: datagrams per sendmsg (UDP_SEGMENT); 0: off
	sizes    string // send --sizes: payload sizes a flow's packets take in turn
}

func addSendFlags(fs *flag.FlagSet) *sendOpts {
	o := &sendOpts{}
	fs.StringVar(&o.dst, "dst", "", "destination(s) IP:PORT[,IP:PORT...]: every flow sends each packet to each destination")
	fs.StringVar(&o.src, "src", "", "source IP to bind (default: any)")
	fs.IntVar(&o.flows, "flows", 1, fmt.Sprintf("number of flows (source ports), 1..%d", maxFlows))
	fs.IntVar(&o.sport, "sport", 10000, "first source port; flow i uses sport+i")
	fs.Float64Var(&o.pps, "pps", 100, "packets per second per flow and destination; 0: unpaced, as fast as sendmmsg goes (bound it with --count and --duration)")
	fs.DurationVar(&o.dur, "duration", 3*time.Second, "how long to send (max 10m)")
	fs.Uint64Var(&o.count, "count", 0, "stop after this many packets per flow and destination (0 = only --duration)")
	fs.IntVar(&o.size, "size", 64, fmt.Sprintf("UDP payload bytes (0..%d; above the path's MTU less the headers, the kernel fragments each datagram)", maxUDPPayload))
	fs.DurationVar(&o.window, "window", 0, "also count packets per flow per window of this length, aligned to the Unix epoch")
	fs.BoolVar(&o.times, "times", false, "also report each packet's send time per flow (µs after the flow's first)")
	fs.BoolVar(&o.seq, "seq", false, "send: number each flow's packets from 0 in the payload's first 8 bytes (big-endian), for recv --times; paced, one destination")
	fs.DurationVar(&o.align, "align", 0, "start sending at the next multiple of this since the Unix epoch (e.g. 1s: on a second boundary; max 1m)")
	fs.IntVar(&o.gso, "gso", 0, fmt.Sprintf("send: UDP GSO, each sendmsg carries this many datagrams of --size (UDP_SEGMENT; the kernel splits them, as late as the device allows), 1..%d; paced; counts and times are per datagram", maxGSOSegs))
	fs.StringVar(&o.sizes, "sizes", "", "send: payload sizes a flow's packets take in turn (\"1000,2900\": the 1st, 3rd ... packet 1000 bytes, the 2nd, 4th ... 2900), in place of --size; paced")
	fs.IntVar(&o.batch, "batch", 64, fmt.Sprintf("unpaced (--pps 0): datagrams per sendmmsg call, 1..%d", maxBatch))
	return o
}

// check validates the shared flags.
func (o *sendOpts) check() error {
	if err := boundDuration("duration", o.dur); err != nil {
		return err
	}
	switch {
	case o.flows < 1 || o.flows > maxFlows:
		return badFlag("--flows %d: must be 1..%d", o.flows, maxFlows)
	case o.sport < 1 || o.sport+o.flows-1 > 65535:
		return badFlag("--sport %d with %d flows: ports must stay within 1..65535", o.sport, o.flows)
	case !(o.pps >= 0 && o.pps <= 1e6):
		return badFlag("--pps %v: must be 0 (unpaced) or > 0 and <= 1000000", o.pps)
	case o.size < 0 || o.size > maxUDPPayload:
		return badFlag("--size %d: must be 0..%d", o.size, maxUDPPayload)
	case o.window < 0:
		return badFlag("--window %v: must be >= 0", o.window)
	case o.align < 0 || o.align > time.Minute:
		return badFlag("--align %v: must be 0..1m", o.align)
	case o.batch < 1 || o.batch > maxBatch:
		return badFlag("--batch %d: must be 1..%d", o.batch, maxBatch)
	case o.times && o.pps > 0 && float64(o.flows)*o.pps*o.dur.Seconds() > 10e6:
		return badFlag("--times keeps 8 bytes per packet: at most 10 million packets (flows × pps × duration)")
	case o.times && o.pps == 0 && (o.count == 0 || float64(o.flows)*float64(o.count) > 10e6):
		return badFlag("--times keeps 8 bytes per packet: unpaced, it needs --count with flows × count at most 10 million")
	case o.seq && (o.pps == 0 || o.size < 8 || strings.Contains(o.dst, ",")):
		return badFlag("--seq: needs --pps > 0, --size >= 8 and one --dst")
	}
	return nil
}

// maxGSOSegs bounds --gso (the kernel's UDP_MAX_SEGMENTS is 64 or more).
const maxGSOSegs = 64

// checkSendOnly validates the flags only send takes (--gso, --sizes), and
// returns --sizes parsed (nil without it). The other modes ignore them:
// they refuse them here.
func (o *sendOpts) checkSendOnly() ([]int, error) {
	if o.gso != 0 {
		switch {
		case o.gso < 1 || o.gso > maxGSOSegs:
			return nil, badFlag("--gso %d: must be 1..%d", o.gso, maxGSOSegs)
		case o.pps == 0 || o.seq || o.sizes != "":
			return nil, badFlag("--gso: paced only (--pps > 0), without --seq or --sizes")
		case o.size < 1 || o.size*o.gso > maxUDPPayload:
			return nil, badFlag("--gso %d × --size %d: must be 1..%d bytes in all", o.gso, o.size, maxUDPPayload)
		}
	}
	if o.sizes == "" {
		return nil, nil
	}
	if o.pps == 0 || o.seq {
		return nil, badFlag("--sizes: paced only (--pps > 0), without --seq")
	}
	var sizes []int
	for _, f := range strings.Split(o.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > maxUDPPayload {
			return nil, badFlag("--sizes %q: each size must be 0..%d", o.sizes, maxUDPPayload)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// parse parses fs (made with addSendFlags as o) from args, then the
// destinations, then runs send's checks.
func (o *sendOpts) parse(fs *flag.FlagSet, args []string) ([]netip.AddrPort, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	dsts, err := parseAddrs("dst", o.dst)
	if err != nil {
		return nil, err
	}
	return dsts, o.check()
}

// parseMode parses a mode's flags other than send's (fs made with
// addSendFlags as o, and the mode's own): the destinations, send's checks,
// and --gso, --sizes and --seq refused (send only).
func (o *sendOpts) parseMode(mode string, fs *flag.FlagSet, args []string) ([]netip.AddrPort, error) {
	dsts, err := o.parse(fs, args)
	if err != nil {
		return nil, err
	}
	if o.gso != 0 || o.sizes != "" {
		return nil, badFlag("--gso and --sizes: send only, not %s", mode)
	}
	if o.seq {
		return nil, badFlag("--seq: send only, not %s", mode)
	}
	return dsts, nil
}

// target is one flow's datagram to one destination.
type target struct {
	write func() error    // send it once
	segs  uint64          // datagrams one write sends (send --gso); 0 is 1
	rc    syscall.RawConn // its socket, for sendmmsg
	buf   []byte          // the bytes written (UDP payload; for send6x the options chain, UDP header and payload)
	sa    []byte          // the destination as a sockaddr of the socket's family, for sendmmsg
}

func runSend(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	o := addSendFlags(fs)
	dsts, err := o.parse(fs, args)
	if err != nil {
		return nil, err
	}
	sizes, err := o.checkSendOnly()
	if err != nil {
		return nil, err
	}
	var srcIP netip.Addr
	if o.src != "" {
		if srcIP, err = netip.ParseAddr(o.src); err != nil {
			return nil, badFlag("--src %q: not an IP address", o.src)
		}
	}

	conns := make([]*net.UDPConn, o.flows)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	payload := make([]byte, o.size*max(o.gso, 1))
	if sizes != nil {
		payload = make([]byte, slices.Max(sizes))
	}
	fillPayload(payload)
	targets := make([][]target, o.flows)
	for i := range conns {
		la := &net.UDPAddr{Port: o.sport + i}
		if srcIP.IsValid() {
			la.IP = srcIP.AsSlice()
		}
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return nil, fmt.Errorf("flow %d: %w", i, err)
		}
		conns[i] = c
		if o.gso > 0 {
			if err := setUDPSegment(c, o.size); err != nil {
				return nil, fmt.Errorf("flow %d: setsockopt UDP_SEGMENT %d: %w", i, o.size, err)
			}
		}
		p := payload
		var seq uint64
		if o.seq {
			p = append([]byte(nil), payload...)
		}
		for _, d := range dsts {
			rc, sa, err := rawSockaddr(c, d)
			if err != nil {
				return nil, fmt.Errorf("flow %d: %w", i, err)
			}
			write := func() error { _, err := c.WriteToUDPAddrPort(p, d); return err }
			if sizes != nil {
				k := 0
				write = func() error {
					n := sizes[k%len(sizes)]
					k++
					_, err := c.WriteToUDPAddrPort(p[:n], d)
					return err
				}
			}
			if o.seq {
				write = func() error {
					binary.BigEndian.PutUint64(p, seq)
					seq++
					_, err := c.WriteToUDPAddrPort(p, d)
					return err
				}
			}
			targets[i] = append(targets[i], target{write: write, segs: uint64(o.gso), rc: rc, buf: p, sa: sa})
		}
	}
	return runTargets(ctx, o, dsts, targets, &SendResult{}), nil
}

// sendLoop sends targets[flow][destination] as o says and fills res.
//
// Paced (--pps > 0): packet i (over all flows) is due at start +
// i*interval and belongs to flow i % flows: flows are interleaved packet by
// packet. A late sender catches up in a burst rather than drifting, so each
// flow's average rate is exactly --pps over the run.
//
// Unpaced (--pps 0): flows take turns, each sending a batch of --batch
// datagrams to each destination with one sendmmsg call, until --count or
// --duration.
func sendLoop(ctx context.Context, o *sendOpts, targets [][]target, res *SendResult) {
	res.Flows = make(map[string]*SendFlow, o.flows)
	res.PPS, res.WindowNs = o.pps, int64(o.window)
	stats := make([]SendFlow, o.flows)
	var wins []map[int64]uint64
	if o.window > 0 {
		wins = make([]map[int64]uint64, o.flows)
		for i := range wins {
			wins[i] = make(map[int64]uint64)
		}
	}
	// count records that flow f sent n datagrams (to one destination) at
	// ns; note, once per flow and packet time, that n of its packets went
	// out to one destination or more (windows and times count a packet
	// once, whatever the number of destinations).
	note := func(f int, ns int64, n uint64) {
		st := &stats[f]
		if n == 0 {
			return
		}
		if wins != nil {
			wins[f][ns/int64(o.window)] += n
		}
		if o.times {
			for range n {
				st.TimesUs = append(st.TimesUs, (ns-st.FirstNs)/1000)
			}
		}
	}
	count := func(f int, ns int64, n uint64) {
		st := &stats[f]
		if n == 0 {
			return
		}
		if st.Sent == 0 {
			st.FirstNs = ns
		}
		st.Sent += n
		st.LastNs = ns
	}

	start := time.Now()
	if o.align > 0 {
		// The next multiple of align since the epoch, as an offset from
		// now so that start keeps its monotonic reading.
		ns := start.UnixNano()
		a := int64(o.align)
		start = start.Add(time.Duration((ns/a+1)*a - ns))
	}
	timer := time.NewTimer(time.Until(start))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	end := start.Add(o.dur)
	if o.pps == 0 {
		unpaced(ctx, o, targets, end, res, count, note)
	} else {
		paced(ctx, o, targets, start, end, timer, res, count, note)
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
		res.Flows[strconv.Itoa(o.sport+f)] = &st
		res.Sent += st.Sent
	}
	if res.Seconds > 0 {
		res.AchievedPPS = float64(res.Sent) / res.Seconds
	}
}

func paced(ctx context.Context, o *sendOpts, targets [][]target, start, end time.Time, timer *time.Timer,
	res *SendResult, count, note func(f int, ns int64, n uint64)) {
	// dueAt is packet i's time, i / (pps × flows) seconds after start,
	// not rounded per packet: a run of d seconds is exactly pps × d
	// packets per flow (i × a rounded interval would fit one more in).
	perSec := o.pps * float64(o.flows)
	dueAt := func(i uint64) time.Time {
		return start.Add(time.Duration(float64(i) * float64(time.Second) / perSec))
	}
	total := uint64(0)
	if o.count > 0 {
		total = o.count * uint64(o.flows)
	}
	var i uint64
	for {
		now := time.Now()
		// Send everything that is due now: woken late, past the end too,
		// everything that was due before the end (a loaded machine makes
		// no packet fewer).
		for ; total == 0 || i < total; i++ {
			due := dueAt(i)
			if due.After(now) {
				break
			}
			if !due.Before(end) {
				return
			}
			f := int(i % uint64(o.flows))
			ns := time.Now().UnixNano()
			var ok uint64
			for _, t := range targets[f] {
				n := max(t.segs, 1)
				if err := t.write(); err != nil {
					res.Errors += n
					continue
				}
				count(f, ns, n)
				ok = n
			}
			note(f, ns, ok)
		}
		if (total > 0 && i >= total) || !now.Before(end) {
			return
		}
		next := dueAt(i)
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

func unpaced(ctx context.Context, o *sendOpts, targets [][]target, end time.Time,
	res *SendResult, count, note func(f int, ns int64, n uint64)) {
	// tried[f][d]: datagrams sent or given up on (failed), so that --count
	// bounds the run even when sends fail.
	tried := make([][]uint64, len(targets))
	for f := range tried {
		tried[f] = make([]uint64, len(targets[f]))
	}
	var b batcher
	for {
		if ctx.Err() != nil || !time.Now().Before(end) {
			return
		}
		progress := false
		for f, ts := range targets {
			var most uint64
			ns := time.Now().UnixNano()
			for d := range ts {
				n := uint64(o.batch)
				if o.count > 0 {
					n = min(n, o.count-tried[f][d])
				}
				if n == 0 {
					continue
				}
				progress = true
				k, err := b.send(&ts[d], int(n))
				sent := uint64(k)
				if err != nil {
					res.Errors += n - sent
					tried[f][d] += n
				} else {
					tried[f][d] += sent
				}
				count(f, ns, sent)
				most = max(most, sent)
			}
			note(f, ns, most)
		}
		if !progress {
			return
		}
	}
}

// fillPayload fills the payload every sender sends: byte i is i*7+1.
func fillPayload(p []byte) {
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
}

// runTargets sends to targets as o says (sendLoop), into res, and returns
// res with its destinations named.
func runTargets(ctx context.Context, o *sendOpts, dsts []netip.AddrPort, targets [][]target, res *SendResult) *SendResult {
	for _, d := range dsts {
		res.Dsts = append(res.Dsts, d.String())
	}
	sendLoop(ctx, o, targets, res)
	return res
}

// sendPackets sends as o says (runTargets), for each of o's flows, to
// each destination d the whole packet build makes for it (from source
// src(d), the flow's source port, o's payload), written with write: the
// senders of whole IP packets (send6hbh, sendtun).
func sendPackets(ctx context.Context, o *sendOpts, dsts []netip.AddrPort, src func(netip.AddrPort) (netip.Addr, error),
	build func(src netip.Addr, d netip.AddrPort, sport uint16, payload []byte) []byte, write func([]byte) error) (any, error) {
	payload := make([]byte, o.size)
	fillPayload(payload)
	targets := make([][]target, o.flows)
	for _, d := range dsts {
		s, err := src(d)
		if err != nil {
			return nil, err
		}
		for f := range targets {
			buf := build(s, d, uint16(o.sport+f), payload)
			targets[f] = append(targets[f], target{write: func() error { return write(buf) }, buf: buf})
		}
	}
	return runTargets(ctx, o, dsts, targets, &SendResult{}), nil
}
