package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

const liveUsage = `Usage: packetshaper [--queue N|N-M] [limiter flags] [live flags]

Shapes live traffic: every packet that an iptables or nft rule sends to
NFQUEUE queue N (or N..M) gets ACCEPT or DROP from a per-flow limiter.
Needs root (CAP_NET_ADMIN). Always queue with bypass, so that traffic flows
when packetshaper is not running, e.g. (or use scripts/rules.sh):

  iptables -I INPUT -p udp --dport 9000 -j NFQUEUE --queue-num 0 --queue-bypass
  iptables -I INPUT -p udp --dport 9000 -j NFQUEUE --queue-balance 0:1 --queue-bypass  # with --queue 0-1
  nft add rule inet filter input udp dport 9000 queue num 0 bypass   # kernels with CONFIG_NFT_QUEUE

A full queue accepts packets without asking (fail-open) unless --fail-closed.
SIGINT/SIGTERM: stop, answer every held packet, log the final stats, exit 0.
SIGHUP: re-read --config FILE. If it is good, each queue switches to the new
settings at its next batch and every flow starts afresh (full bucket, empty
windows: each flow may send a burst again); counters go on. If it is bad, one
error is logged and the old settings stay. Without --config, it is logged
and ignored. Limiter flags given on the command line override the file.

Flags:
`

// liveFlags are the flags of the live shaper beside the limiter flags.
type liveFlags struct {
	queue       string
	maxLen      uint
	copyRange   uint
	readBuffer  int
	batch       int
	failClosed  bool
	statsEvery  time.Duration
	logFormat   string
	metricsAddr string
	latency     bool
	rtPrio      int
}

func addLiveFlags(fs *flag.FlagSet) *liveFlags {
	f := &liveFlags{}
	fs.StringVar(&f.queue, "queue", "0", "NFQUEUE number `N`, or a range N-M: one reader and one engine per queue (rule: --queue-balance N:M, which keeps each flow on one queue)")
	fs.UintVar(&f.maxLen, "queue-maxlen", nfq.DefaultMaxQueueLen, "packets the kernel holds per queue waiting for a verdict; beyond it packets fail open (or are dropped with --fail-closed)")
	fs.UintVar(&f.copyRange, "copy-range", nfq.DefaultCopyRange, "bytes of each packet copied from the kernel, from the IP header (enough for the headers; the length for --bitrate comes from the IP header)")
	fs.IntVar(&f.readBuffer, "read-buffer", nfq.DefaultReadBuffer, "netlink socket receive buffer in `bytes` per queue")
	fs.IntVar(&f.batch, "batch", nfq.DefaultBatchSize, "most packets read and answered at once (batches never wait to fill)")
	fs.BoolVar(&f.failClosed, "fail-closed", false, "drop packets that find the queue full instead of accepting them")
	fs.DurationVar(&f.statsEvery, "stats-interval", 10*time.Second, "log a stats line this often (0: only the final one at exit)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.BoolVar(&f.latency, "latency", false, "measure each packet's verdict latency (from entering the network stack to its verdict) and log p50/p99/max; turns on kernel receive timestamps system-wide")
	fs.IntVar(&f.rtPrio, "rt-priority", 0, "run the whole process under the real-time policy SCHED_FIFO at this `priority` (1-99, 1 is enough): keeps the verdict latency's tail low when other processes load the CPUs; needs root or CAP_SYS_NICE (0: off)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus text metrics at http://`ADDR`/metrics; ADDR must be a loopback address, e.g. 127.0.0.1:9464")
	return f
}

// parseQueues parses "N" or "N-M" into the queue numbers.
func parseQueues(s string) ([]uint16, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("--queue: %q is not a queue number 0-65535 or a range N-M", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
			return nil, fmt.Errorf("--queue: %q is not a queue number 0-65535 or a range N-M with N <= M", s)
		}
	}
	if b-a >= 64 {
		return nil, fmt.Errorf("--queue: %q is %d queues; at most 64", s, b-a+1)
	}
	var qs []uint16
	for q := a; q <= b; q++ {
		qs = append(qs, uint16(q))
	}
	return qs, nil
}

// checkLoopback accepts host:port where host is a loopback IP or localhost.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %v", err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--metrics-addr: %q is not a loopback address (127.0.0.1:PORT or [::1]:PORT)", addr)
	}
	return nil
}

// worker is one queue with its own engine. The engine is used only by the
// queue's Run goroutine; what the logger needs from it is copied into
// atomics there (snapshot), at most every snapEvery.
//
// A reload (SIGHUP) stores a new engine in pending; decide swaps it in at
// the start of its next batch, on the queue's goroutine, so the per-packet
// path takes no lock: one atomic load per batch. The new engine's table is
// empty (every flow starts afresh); base carries the old engines' counters
// so that malformed and evictions never go down.
type worker struct {
	queue   uint16
	q       *nfq.Queue
	eng     *shaper.Engine
	pending atomic.Pointer[shaper.Engine]
	base    shaper.Stats // counters of the engines swapped out

	lastSnap  int64
	flows     atomic.Uint64
	malformed atomic.Uint64
	evictions atomic.Uint64
}

const snapEvery = int64(100 * time.Millisecond)

// decide is the nfq.Handler: the engine decides, nfq answers. It does not
// allocate.
func (w *worker) decide(batch []nfq.Packet, verdicts []nfq.Verdict, now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	for i := range batch {
		if w.eng.Decide(batch[i].Data, now) == shaper.Drop {
			verdicts[i].Action = nfq.Drop
		}
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
}

// swap replaces the engine with the pending one (see worker).
func (w *worker) swap(now int64) {
	s := w.eng.Stats()
	w.base.Malformed += s.Malformed
	w.base.Evictions += s.Evictions
	w.eng = w.pending.Swap(nil)
	w.lastSnap = now - snapEvery // the flows gauge follows at this batch's end
}

func (w *worker) snapshot(now int64) {
	s := w.eng.Stats()
	w.flows.Store(s.Flows)
	w.malformed.Store(w.base.Malformed + s.Malformed)
	w.evictions.Store(w.base.Evictions + s.Evictions)
	w.lastSnap = now
}

// totals sums the counters of all queues.
type totals struct {
	nfq.Stats
	flows, malformed, evictions uint64
	kernel                      nfq.KernelStats // summed over the bound queues
	latency                     nfq.LatencyStats
}

func sum(ws []*worker) totals {
	var t totals
	for _, w := range ws {
		s := w.q.Stats()
		t.Packets += s.Packets
		t.Accepted += s.Accepted
		t.Dropped += s.Dropped
		t.Batches += s.Batches
		t.VerdictMsgs += s.VerdictMsgs
		t.ENOBUFS += s.ENOBUFS
		t.Lost += s.Lost
		t.Errors += s.Errors
		t.flows += w.flows.Load()
		t.malformed += w.malformed.Load()
		t.evictions += w.evictions.Load()
		// Quantiles do not add up over queues: report the worst queue's.
		if l := w.q.Latency(); l.P99 > t.latency.P99 || l.Max > t.latency.Max {
			c := t.latency.Count + l.Count
			t.latency = l
			t.latency.Count = c
		} else {
			t.latency.Count += l.Count
		}
		if ks, err := w.q.KernelStats(); err == nil {
			t.kernel.QueueTotal += ks.QueueTotal
			t.kernel.QueueDropped += ks.QueueDropped
			t.kernel.UserDropped += ks.UserDropped
		}
	}
	return t
}

func logStats(log *slog.Logger, msg string, ws []*worker, elapsed time.Duration, latency bool) {
	t := sum(ws)
	attrs := []any{
		"packets", t.Packets, "accepted", t.Accepted, "dropped", t.Dropped,
		"malformed", t.malformed, "flows", t.flows, "evictions", t.evictions,
		"queued", t.kernel.QueueTotal, "queue_drops", t.kernel.QueueDropped,
		"socket_drops", t.kernel.UserDropped, "lost", t.Lost, "enobufs", t.ENOBUFS,
		"errors", t.Errors, "batches", t.Batches, "verdict_msgs", t.VerdictMsgs,
		"secs", fmt.Sprintf("%.3f", elapsed.Seconds()),
	}
	if len(ws) > 1 {
		var b strings.Builder
		for i, w := range ws {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d:%d", w.queue, w.q.Stats().Packets)
		}
		attrs = append(attrs, "per_queue", b.String())
	}
	if latency {
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e3) }
		attrs = append(attrs, "lat_count", t.latency.Count, "lat_p50_us", us(t.latency.P50),
			"lat_p99_us", us(t.latency.P99), "lat_max_us", us(t.latency.Max))
	}
	log.Info(msg, attrs...)
}

// runLive is the root command: exit status 0 after a clean stop, 1 when the
// queue cannot be bound or fails, 2 on bad usage.
func runLive(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("packetshaper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, liveUsage)
		fs.PrintDefaults()
	}
	addLimiterFlags(fs) // read back by newConfigSource, over the --config file
	configFile := addConfigFlag(fs)
	f := addLiveFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// SIGHUP reloads --config; caught from here on, so that it never kills
	// the process (its default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "packetshaper: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (packetshaper --help)", fs.Arg(0))
	}
	src := newConfigSource(fs, *configFile)
	cfg, _, err := src.load()
	if err != nil {
		return usage("%v", err)
	}
	queues, err := parseQueues(f.queue)
	if err != nil {
		return usage("%v", err)
	}
	switch {
	case f.maxLen < 1 || f.maxLen > 1<<20:
		return usage("--queue-maxlen must be between 1 and %d, not %d", 1<<20, f.maxLen)
	case f.copyRange < 64 || f.copyRange > nfq.MaxCopyRange:
		return usage("--copy-range must be between 64 and %d, not %d", nfq.MaxCopyRange, f.copyRange)
	case f.readBuffer < 1<<16 || f.readBuffer > 1<<30:
		return usage("--read-buffer must be between 65536 and %d bytes, not %d", 1<<30, f.readBuffer)
	case f.rtPrio < 0 || f.rtPrio > 99:
		return usage("--rt-priority must be between 0 (off) and 99, not %d", f.rtPrio)
	case f.batch < 1 || f.batch > 1024:
		return usage("--batch must be between 1 and 1024, not %d", f.batch)
	case f.statsEvery < 0:
		return usage("--stats-interval must not be negative, not %v", f.statsEvery)
	}
	var log *slog.Logger
	switch f.logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		return usage("--log-format must be text or json, not %q", f.logFormat)
	}
	if f.metricsAddr != "" {
		if err := checkLoopback(f.metricsAddr); err != nil {
			return usage("%v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	logf := func(format string, a ...any) { log.Warn(fmt.Sprintf(format, a...)) }
	var ws []*worker
	defer func() {
		for _, w := range ws {
			w.q.Close()
		}
	}()
	for _, qn := range queues {
		eng, err := newEngine(cfg)
		if err != nil {
			return usage("%v", trimPkg(err))
		}
		q, err := nfq.Open(nfq.Config{
			Queue:            qn,
			MaxQueueLen:      uint32(f.maxLen),
			CopyRange:        uint32(f.copyRange),
			FailClosed:       f.failClosed,
			ReadBuffer:       f.readBuffer,
			BatchSize:        f.batch,
			Latency:          f.latency,
			RealtimePriority: f.rtPrio,
			Logf:             logf,
		})
		if err != nil {
			fmt.Fprintln(stderr, "packetshaper:", oneLine(err.Error()))
			return 1
		}
		ws = append(ws, &worker{queue: qn, q: q, eng: eng})
	}

	var srv *http.Server
	if f.metricsAddr != "" {
		ln, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			fmt.Fprintln(stderr, "packetshaper: --metrics-addr:", oneLine(err.Error()))
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "text/plain; version=0.0.4")
			writeMetrics(rw, ws)
		})
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}

	mode := "fail-open"
	if f.failClosed {
		mode = "fail-closed"
	}
	attrs := []any{"queues", f.queue, "algo", cfg.Algorithm.String(), "rate", cfg.Rate, "bytes", cfg.Bytes,
		"queue_maxlen", f.maxLen, "copy_range", f.copyRange, "mode", mode}
	if *configFile != "" {
		attrs = append(attrs, "config", *configFile)
	}
	log.Info("shaping", attrs...)

	start := time.Now()
	errs := make(chan error, len(ws))
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.q.Run(runCtx, w.decide)
			w.snapshot(time.Now().UnixNano()) // Run has returned: the engine is ours
			if err != nil {
				errs <- err
				cancel() // one queue failing stops all
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	var tick <-chan time.Time
	if f.statsEvery > 0 {
		t := time.NewTicker(f.statsEvery)
		defer t.Stop()
		tick = t.C
	}
loop:
	for {
		select {
		case <-tick:
			logStats(log, "stats", ws, time.Since(start), f.latency)
		case <-hup:
			reload(log, src, ws)
		case <-finished:
			break loop
		}
	}
	// Unbound now: KernelStats has nothing to add.
	logStats(log, "final stats", ws, time.Since(start), f.latency)
	close(errs)
	if err := <-errs; err != nil {
		log.Error(oneLine(err.Error()))
		return 1
	}
	return 0
}

// writeMetrics writes the counters in the Prometheus text format.
func writeMetrics(w io.Writer, ws []*worker) {
	type metric struct {
		name, typ, help string
		get             func(*worker, nfq.Stats) uint64
	}
	for _, m := range []metric{
		{"packetshaper_packets_total", "counter", "Packets decided.", func(_ *worker, s nfq.Stats) uint64 { return s.Packets }},
		{"packetshaper_accepted_total", "counter", "Packets accepted.", func(_ *worker, s nfq.Stats) uint64 { return s.Accepted }},
		{"packetshaper_dropped_total", "counter", "Packets dropped.", func(_ *worker, s nfq.Stats) uint64 { return s.Dropped }},
		{"packetshaper_malformed_total", "counter", "Packets that did not decode as IP.", func(w *worker, _ nfq.Stats) uint64 { return w.malformed.Load() }},
		{"packetshaper_flows", "gauge", "Flows in the flow table.", func(w *worker, _ nfq.Stats) uint64 { return w.flows.Load() }},
		{"packetshaper_flow_evictions_total", "counter", "Flows evicted from a full table.", func(w *worker, _ nfq.Stats) uint64 { return w.evictions.Load() }},
		{"packetshaper_lost_total", "counter", "Packets queued by the kernel that never reached packetshaper (socket buffer full).", func(_ *worker, s nfq.Stats) uint64 { return s.Lost }},
		{"packetshaper_enobufs_total", "counter", "Socket receive buffer overruns.", func(_ *worker, s nfq.Stats) uint64 { return s.ENOBUFS }},
		{"packetshaper_errors_total", "counter", "Receive and verdict errors.", func(_ *worker, s nfq.Stats) uint64 { return s.Errors }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, wk := range ws {
			fmt.Fprintf(w, "%s{queue=\"%d\"} %d\n", m.name, wk.queue, m.get(wk, wk.q.Stats()))
		}
	}
}
