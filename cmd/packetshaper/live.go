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

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/offload"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

const liveUsage = `Usage: packetshaper [--queue N|N-M] [--policy FILE | limiter flags] [live flags]

Shapes live traffic: every packet that an iptables or nft rule sends to
NFQUEUE queue N (or N..M) gets ACCEPT or DROP from the first rule of the
policy that matches it: a TOML rule file (--policy FILE, see README,
Policies), or one rule made of the limiter flags (--pps 100 limits every
packet to 100 packets/s per 5-tuple). Needs root (CAP_NET_ADMIN). Always
queue with bypass, so that traffic flows when packetshaper is not running,
e.g. (or use scripts/rules.sh):

  iptables -I INPUT -p udp --dport 9000 -j NFQUEUE --queue-num 0 --queue-bypass
  iptables -I INPUT -p udp --dport 9000 -j NFQUEUE --queue-balance 0:1 --queue-bypass  # with --queue 0-1
  nft add rule inet filter input udp dport 9000 queue num 0 bypass   # kernels with CONFIG_NFT_QUEUE

A full queue accepts packets without asking (fail-open) unless --fail-closed;
such packets are counted as failopen_passed in the stats and metrics.
SIGINT/SIGTERM: stop, answer every held packet, log the final stats, exit 0.
SIGHUP: re-read --policy FILE. Rules whose name, match, key and limiter
settings are unchanged keep their flows and limiter state (no fresh burst);
changed and new rules start empty; the log says which rules kept state. A bad
file changes nothing and logs one error. Without --policy, SIGHUP is ignored.

Flags:
`

// liveFlags are the flags of the live shaper beside the policy flags.
type liveFlags struct {
	queue          string
	maxLen         uint
	copyRange      uint
	readBuffer     int
	batch          int
	failClosed     bool
	statsEvery     time.Duration
	logFormat      string
	metricsAddr    string
	latency        bool
	rtPrio         int
	offload        bool
	offloadAfter   uint
	offloadTimeout time.Duration
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
	fs.BoolVar(&f.offload, "offload", false, "drop a flow that keeps being dropped in the kernel for --offload-timeout, so that its flood never fills the queue (needs the offload set and rule: scripts/rules.sh add ... --offload)")
	fs.UintVar(&f.offloadAfter, "offload-after", 1000, "with --offload: offload a flow after this many of its packets in a row were dropped")
	fs.DurationVar(&f.offloadTimeout, "offload-timeout", 2*time.Second, "with --offload: how long an offloaded flow is dropped in the kernel before it comes back to the shaper")
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

// offloader is what a worker hands the flows to drop in the kernel to
// (offload.Offloader); Add must not block or allocate.
type offloader interface{ Add(k flows.Key) }

// worker is one queue with its own engine. The engine is used only by the
// queue's Run goroutine; what the logger and the metrics need from it is
// copied into an immutable snapshot there, at most every snapEvery (and
// when the queue is idle), and published with an atomic store.
//
// A reload (SIGHUP) stores a new engine in pending, made by Engine.Reload
// from the current one so that unchanged rules share its state; decide swaps
// it in at the start of its next batch, on the queue's goroutine, so the
// per-packet path takes no lock: one atomic load per batch.
type worker struct {
	queue   uint16
	q       *nfq.Queue
	eng     *shaper.Engine                // Run's goroutine only
	cur     atomic.Pointer[shaper.Engine] // eng, for Reload on another goroutine
	pending atomic.Pointer[shaper.Engine]
	off     offloader // nil without --offload

	meta shaper.Meta
	dec  shaper.Decision

	lastSnap int64
	snap     atomic.Pointer[snapshot]
}

// snapshot is what a worker's engine had counted at one time.
type snapshot struct {
	shaper.Stats
	rules []ruleSnap
}

type ruleSnap struct {
	name string
	shaper.RuleStats
}

const snapEvery = int64(100 * time.Millisecond)

func newWorker(queue uint16, eng *shaper.Engine) *worker {
	w := &worker{queue: queue, eng: eng}
	w.meta.Queue = queue
	w.cur.Store(eng)
	w.snapshot(0)
	return w
}

// decide is the nfq.Handler: the engine decides, nfq answers. It does not
// allocate, but to publish a snapshot (every snapEvery).
func (w *worker) decide(batch []nfq.Packet, verdicts []nfq.Verdict, now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	for i := range batch {
		p := &batch[i]
		w.meta.Mark, w.meta.InIf, w.meta.OutIf = p.Mark, p.InDev, p.OutDev
		w.eng.DecidePacket(p.Data, &w.meta, now, &w.dec)
		switch {
		case w.dec.Verdict == shaper.Drop:
			verdicts[i].Action = nfq.Drop
		case w.dec.SetMark:
			verdicts[i].SetMark, verdicts[i].Mark = true, w.dec.Mark
		}
	}
	if w.off != nil {
		w.eng.TakeOffloads(w.off.Add)
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
}

// idle is nfq's Idle hook: counters stay current when no traffic flows.
func (w *worker) idle(now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
}

// swap replaces the engine with the pending one (see worker).
func (w *worker) swap(now int64) {
	w.eng = w.pending.Swap(nil)
	w.cur.Store(w.eng)
	w.lastSnap = now - snapEvery // the snapshot follows at this batch's end
}

func (w *worker) snapshot(now int64) {
	s := &snapshot{Stats: w.eng.Stats(), rules: make([]ruleSnap, w.eng.NumRules())}
	for i := range s.rules {
		s.rules[i] = ruleSnap{name: w.eng.Rule(i).Name, RuleStats: w.eng.RuleStats(i)}
	}
	w.snap.Store(s)
	w.lastSnap = now
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
	pf := addPolicyFlags(fs)
	f := addLiveFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// SIGHUP reloads --policy; caught from here on, so that it never kills
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
	src, err := pf.source(policy.Options{IfIndex: ifIndex})
	if err != nil {
		return usage("%v", err)
	}
	comp, err := src.load()
	if err != nil {
		return usage("%v", oneLine(err.Error()))
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
	case f.offload && (f.offloadAfter < 1 || f.offloadAfter > 1<<31):
		return usage("--offload-after must be between 1 and %d, not %d", 1<<31, f.offloadAfter)
	case f.offload && f.offloadTimeout < time.Second/10:
		return usage("--offload-timeout must be at least 100ms, not %v", f.offloadTimeout)
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
	globals := func(p shaper.Policy) shaper.Policy {
		p.Malformed = src.malformed
		if f.offload {
			p.OffloadAfter = uint32(f.offloadAfter)
		}
		return p
	}
	for _, w := range comp.Warnings() {
		log.Warn(w)
	}
	if err := offloadable(f.offload, comp); err != nil {
		return usage("%v", err)
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
		eng, err := shaper.NewPolicy(globals(comp.Policy()))
		if err != nil {
			return usage("%v", trimPkg(err))
		}
		w := newWorker(qn, eng)
		q, err := nfq.Open(nfq.Config{
			Queue:            qn,
			MaxQueueLen:      uint32(f.maxLen),
			CopyRange:        uint32(f.copyRange),
			FailClosed:       f.failClosed,
			ReadBuffer:       f.readBuffer,
			BatchSize:        f.batch,
			Latency:          f.latency,
			RealtimePriority: f.rtPrio,
			Idle:             w.idle,
			Logf:             logf,
		})
		if err != nil {
			fmt.Fprintln(stderr, "packetshaper:", oneLine(err.Error()))
			return 1
		}
		w.q = q
		ws = append(ws, w)
	}

	// Startup hint: rules that send to queues nobody serves.
	if rules, err := nfq.QueueRules(); err == nil {
		bound, _ := nfq.BoundQueues()
		for _, u := range nfq.UnservedQueues(rules, bound) {
			log.Warn(u.String())
		}
	}
	qs := make([]*nfq.Queue, len(ws))
	for i, w := range ws {
		qs[i] = w.q
	}
	mon, err := nfq.NewMonitor(qs, nfq.MonitorConfig{Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "packetshaper:", oneLine(err.Error()))
		return 1
	}
	defer mon.Close() // after the queues' Run returned (deferred later, run earlier)

	var off *offload.Offloader
	if f.offload {
		if off, err = offload.Open(offload.Config{Timeout: f.offloadTimeout, Logf: logf}); err != nil {
			fmt.Fprintln(stderr, "packetshaper: --offload:", oneLine(err.Error()))
			return 1
		}
		// Closed after the queues have stopped (deferred after them, so
		// run before): every element still live is deleted.
		defer func() {
			if err := off.Close(); err != nil {
				log.Warn("offload: removing the offloaded flows: " + oneLine(err.Error()))
			}
		}()
		for _, w := range ws {
			w.off = off
		}
	}

	if f.metricsAddr != "" {
		ln, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			fmt.Fprintln(stderr, "packetshaper: --metrics-addr:", oneLine(err.Error()))
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "text/plain; version=0.0.4")
			writeMetrics(rw, ws, mon, off)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}

	mode := "fail-open"
	if f.failClosed {
		mode = "fail-closed"
	}
	log.Info("shaping", "queues", f.queue, "policy", src.describe(), "rules", ruleNames(ws[0].eng),
		"queue_maxlen", f.maxLen, "copy_range", f.copyRange, "mode", mode, "offload", f.offload,
		"tables_max_mib", fmt.Sprintf("%.0f", float64(ws[0].eng.MaxBytes())*float64(len(ws))/(1<<20)))

	start := time.Now()
	errs := make(chan error, len(ws))
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go mon.Run(runCtx)
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
			logStats(log, "stats", ws, mon, off, time.Since(start), f.latency)
		case <-hup:
			reload(log, src, globals, ws)
		case <-finished:
			break loop
		}
	}
	logStats(log, "final stats", ws, mon, off, time.Since(start), f.latency)
	close(errs)
	if err := <-errs; err != nil {
		log.Error(oneLine(err.Error()))
		return 1
	}
	return 0
}

// offloadable refuses --offload with a policy whose rules match on a
// packet's mark, interfaces or queue: the kernel drops an offloaded flow by
// its 5-tuple alone, and would drop packets of that 5-tuple that such a
// rule tells apart (and might accept).
func offloadable(offload bool, c *policy.Compiled) error {
	if r := c.MetaRules(); offload && len(r) > 0 {
		return fmt.Errorf("--offload: rule %q matches on mark, interface or queue, which the kernel's offload (by 5-tuple alone) cannot tell apart; drop --offload or those match keys", r[0])
	}
	return nil
}

// ifIndex resolves an interface name in packetshaper's network namespace.
func ifIndex(name string) (uint32, bool) {
	i, err := net.InterfaceByName(name)
	if err != nil {
		return 0, false
	}
	return uint32(i.Index), true
}

func ruleNames(e *shaper.Engine) string {
	var names []string
	for i := 0; i < e.NumRules(); i++ {
		names = append(names, e.Rule(i).Name)
	}
	return strings.Join(names, ",")
}

// reload re-reads the policy on SIGHUP and hands each worker a new engine
// made by Engine.Reload from its current one, which the worker's own
// goroutine swaps in at its next batch (worker.decide). Rules whose name,
// match, key and limiter settings are unchanged keep their flows and limiter
// state, so a reload never grants a fresh burst; changed and new rules start
// empty; counters go on. A bad file changes nothing.
func reload(log *slog.Logger, src *policySource, globals func(shaper.Policy) shaper.Policy, ws []*worker) {
	if src.file == "" {
		log.Warn("SIGHUP: no --policy file, nothing to reload")
		return
	}
	comp, err := src.load()
	if err == nil {
		err = offloadable(ws[0].off != nil, comp)
	}
	if err == nil {
		engs := make([]*shaper.Engine, len(ws))
		var kept []string
		for i, w := range ws {
			if engs[i], kept, err = w.cur.Load().Reload(globals(comp.Policy())); err != nil {
				break
			}
		}
		if err == nil {
			for i, w := range ws {
				w.pending.Store(engs[i])
			}
			for _, wmsg := range comp.Warnings() {
				log.Warn(wmsg)
			}
			log.Info("reloaded", "policy", src.file, "rules", ruleNames(engs[0]), "kept_state", strings.Join(kept, ","))
			return
		}
	}
	log.Error("reload failed, keeping the previous policy", "err", oneLine(err.Error()))
}
