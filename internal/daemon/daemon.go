// Package daemon is the running shaper: one worker per NFQUEUE queue, all
// deciding with one engine (so that a key is limited once whichever queue
// its packets arrive on), the fail-open monitor, the kernel offload, reloads on
// SIGHUP, the stats log, the metrics endpoint and the control socket
// (package internal/control). The command (cmd/packetshaper) parses flags and
// wires a Config and a policy Source to Run.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/offload"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// Source is where the policy comes from: a rule file re-read at each Load
// (Reloadable), or the command line's one-rule policy.
type Source interface {
	// Load reads and compiles the policy.
	Load() (*policy.Compiled, error)
	// Reloadable reports whether a reload can change anything (a file).
	Reloadable() bool
	// Describe names the source for logs: the file, or "command line".
	Describe() string
}

// MaxRealtimePriority is the highest Config.RealtimePriority (the
// kernel's highest SCHED_FIFO priority).
const MaxRealtimePriority = 99

// Config is how the daemon runs. Queue is the template of every queue's
// nfq.Config (its Queue and Idle fields are set per queue).
type Config struct {
	Queues []uint16
	Queue  nfq.Config
	// RealtimePriority, if above 0, puts the whole process under the
	// real-time scheduling policy SCHED_FIFO at this priority (1 to
	// MaxRealtimePriority; 1, the lowest, is enough), once, before Run
	// opens the queues. The queues' readers then preempt every normal
	// (SCHED_OTHER) thread of other processes on their CPU as soon as a
	// packet wakes them, which cuts the verdict latency's tail when those
	// load the machine (docs/design.md). Every thread of the process,
	// not only a reader's (see setProcessRealtime). The process stays
	// real-time until it exits; the kernel's real-time throttling
	// (kernel.sched_rt_runtime_us) still leaves other processes their
	// share. Same effect as starting it under `chrt -f 1`. It needs root
	// or CAP_SYS_NICE (or an RLIMIT_RTPRIO of at least the priority): Run
	// fails with an error wrapping nfq.ErrPermission without it. 0 (the
	// default) leaves the scheduling policy alone.
	RealtimePriority int
	// Malformed is the verdict for packets with an invalid IP header.
	Malformed shaper.Verdict
	// Offload turns on the kernel offload of flows dropped OffloadAfter
	// times in a row, for OffloadTimeout.
	Offload        bool
	OffloadAfter   uint32
	OffloadTimeout time.Duration
	// StatsEvery is the period of the stats log line (0: only the final
	// one).
	StatsEvery time.Duration
	// MetricsAddr, if not empty, serves Prometheus metrics there
	// (http://MetricsAddr/metrics), on any address it names.
	MetricsAddr string
	// Collectors are served with the daemon's metrics (a global limiter's,
	// say).
	Collectors []prometheus.Collector
	// ControlSocket, if not empty, is the path of the control socket
	// (package internal/control), created mode 0600 and removed at stop.
	// If ControlSocketOptional, a path Run cannot use (another process
	// answers on it, no permission) is logged and the daemon runs without
	// one (for a default path); otherwise it is an error.
	ControlSocket         string
	ControlSocketOptional bool
	// Version is reported in packetshaper_build_info and the status.
	Version string
	// Log receives every log line.
	Log *slog.Logger
	// Fastpath: the kernel fast path (fastpath.go); off without Ifaces.
	Fastpath FastpathConfig
}

// UsageError is an error in what the daemon was asked to do (a policy it
// cannot run as configured): the command exits 2 for it, 1 for others.
type UsageError struct{ error }

func (e UsageError) Unwrap() error { return e.error }

// Check reports whether c's policy can run with cfg: an engine can be made
// for it, and --offload is not combined with rules matching on metadata.
func Check(cfg *Config, c *policy.Compiled) error {
	if _, err := shaper.NewPolicy(cfg.policy(c)); err != nil {
		return UsageError{err}
	}
	return offloadable(cfg.Offload, c)
}

// policy is c's engine policy with the daemon's settings beside the rules.
func (cfg *Config) policy(c *policy.Compiled) shaper.Policy {
	p := c.Policy()
	p.Malformed = cfg.Malformed
	if cfg.Offload {
		p.OffloadAfter = cfg.OffloadAfter
	}
	return p
}

// offloadable refuses --offload with a policy whose rules match on a
// packet's mark, interfaces or queue: the kernel drops an offloaded flow by
// its 5-tuple alone, and would drop packets of that 5-tuple that such a
// rule tells apart (and might accept).
func offloadable(offload bool, c *policy.Compiled) error {
	if r := c.MetaRules(); offload && len(r) > 0 {
		return UsageError{fmt.Errorf("--offload: rule %q matches on mark, interface or queue, which the kernel's offload (by 5-tuple alone) cannot tell apart; drop --offload or those match keys", r[0])}
	}
	return nil
}

// Run binds the queues and shapes until ctx is cancelled (a clean stop:
// every held packet is answered), reloading the policy from src on each
// value of hup. comp is the policy src gave at startup, checked by Check.
// It returns nil after a clean stop; its errors are one line (UsageError
// for a policy it cannot run).
func Run(ctx context.Context, cfg Config, src Source, comp *policy.Compiled, hup <-chan os.Signal) error {
	log := cfg.Log
	if err := Check(&cfg, comp); err != nil {
		return err
	}
	// The global rules' store: opened now, not waited for (a store that
	// is down makes them fall back); closed after the queues stopped.
	gl := newGlobals(log, 1) // one engine
	defer gl.close()
	pol, _, err := gl.prepare(cfg.policy(comp), comp)
	if err != nil {
		return UsageError{fmt.Errorf("%s: %w", src.Describe(), err)}
	}
	var qs []*nfq.Queue
	defer func() {
		for _, q := range qs {
			q.Close()
		}
	}()
	logf := func(format string, a ...any) { log.Warn(fmt.Sprintf(format, a...)) }
	// One engine for every queue: the kernel spreads a key's packets
	// over the queues (--queue-balance hashes addresses and protocol),
	// and the key has one bucket.
	eng, err := shaper.NewPolicy(pol)
	if err != nil {
		return UsageError{err}
	}
	// The real-time policy: once for the whole process, before the
	// queues open (threads the runtime starts later inherit it).
	if p := cfg.RealtimePriority; p != 0 {
		if p < 0 || p > MaxRealtimePriority {
			return UsageError{fmt.Errorf("--rt-priority %d out of range (1..%d, or 0 for none)", p, MaxRealtimePriority)}
		}
		if err := setProcessRealtime(p); err != nil {
			return fmt.Errorf("--rt-priority: %w", err)
		}
	}
	ws := newWorkers(cfg.Queues, eng)
	for _, w := range ws {
		w.failClosed = cfg.Queue.FailClosed
		qc := cfg.Queue
		qc.Queue, qc.Idle, qc.Logf = w.queue, w.idle, logf
		qc.Conntrack = qc.Conntrack || len(comp.CtStateRules()) > 0
		q, err := nfq.Open(qc)
		if err != nil {
			return err
		}
		w.q, w.conntrack, w.askedCt = q, q.Conntrack(), qc.Conntrack
		qs = append(qs, q)
	}
	// The policy's warnings once it runs (a start that fails says one
	// line: its error).
	for _, w := range comp.Warnings() {
		log.Warn(w)
	}
	// The kernel fast path: attached once the queues are bound.
	fp, err := startFastpath(log, cfg.Fastpath, comp)
	if err != nil {
		return err
	}
	defer fp.close() // before the queues close: a clean stop detaches
	if fp != nil {
		for _, w := range ws {
			w.punt = fp.puntMark()
		}
		ws[0].fast.Store(&fastCounts{get: fp.counts})
	}
	ws[0].wake = func() {
		for _, q := range qs {
			q.Wake()
		}
	}

	// Startup hint: rules that send to queues nobody serves.
	if rules, err := failopen.QueueRules(); err == nil {
		bound, _ := nfq.BoundQueues()
		for _, u := range failopen.UnservedQueues(rules, bound) {
			log.Warn(u.String())
		}
		if fp != nil {
			for _, h := range fastpathRuleHints(rules, cfg.Queues) {
				log.Warn(h)
			}
		}
	}
	mon, err := failopen.NewMonitor(qs, failopen.MonitorConfig{Logger: log})
	if err != nil {
		return err
	}
	defer mon.Close() // after the queues' Run returned (deferred later, run earlier)

	var off *offload.Offloader
	if cfg.Offload {
		if off, err = offload.Open(offload.Config{Timeout: cfg.OffloadTimeout, Logf: logf}); err != nil {
			return fmt.Errorf("--offload: %w", err)
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

	start := time.Now()
	d := &state{cfg: &cfg, ws: ws, mon: mon, off: off, gl: gl, fp: fp, policy: src.Describe(), start: start, loaded: start}
	// What the startup line says is served: the address and socket
	// actually in use, or "off".
	metricsAt, controlAt := "off", "off"
	if cfg.MetricsAddr != "" {
		h, err := metricsHandler(d)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer serveMetrics(ln, h).Close()
		metricsAt = "http://" + ln.Addr().String() + "/metrics"
	}
	ln, err := listenControl(&cfg, log)
	if err != nil {
		return err
	}
	if ln != nil {
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() {
			control.Serve(ctx, ln, d, logf)
			close(served)
		}()
		// After the queues have stopped (deferred earlier, so run
		// later): listings in progress end, the file goes.
		defer func() { cancel(); <-served }()
		controlAt = cfg.ControlSocket
	}

	mode := "fail-open"
	if cfg.Queue.FailClosed {
		mode = "fail-closed"
	}
	log.Info("shaping", append([]any{"queues", queueList(cfg.Queues), "policy", src.Describe(),
		"rule_count", ws[0].eng.NumRules(), "rules", ruleNames(ws[0].eng),
		"metrics", metricsAt, "control_socket", controlAt,
		"queue_maxlen", cfg.Queue.MaxQueueLen, "copy_range", cfg.Queue.CopyRange, "mode", mode, "offload", cfg.Offload,
		"max_held", ws[0].q.HoldStats().MaxHeld,
		"tables_max_mib", fmt.Sprintf("%.0f", float64(ws[0].eng.MaxBytes())/(1<<20)),
		"kernel_maps_mib", fp.kernelMapsMiB()}, gl.describe()...)...)

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
			w.stop(time.Now().UnixNano()) // the final snapshot

			if err != nil {
				errs <- err
				cancel() // one queue failing stops all
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	var tick <-chan time.Time
	if cfg.StatsEvery > 0 {
		t := time.NewTicker(cfg.StatsEvery)
		defer t.Stop()
		tick = t.C
	}
	// Interface names are resolved to indexes at compile: look for
	// interfaces re-created (a new index), come or gone.
	ifTick := time.NewTicker(ifaceCheckEvery)
	defer ifTick.Stop()
	rl := &reloader{src: src}
loop:
	for {
		select {
		case <-tick:
			d.logStats(log, "stats", time.Since(start), false)
		case <-hup:
			if !src.Reloadable() {
				// Not a reload: logged, not counted (a failed
				// reload would set last_reload_successful 0).
				log.Warn("SIGHUP: no --policy file, nothing to reload: ignored")
				continue
			}
			next, stopped, err := rl.load(finished)
			if stopped {
				break loop
			}
			// The kernel's program first: one it refuses fails the
			// whole reload, both paths keep the previous policy.
			var kept []string
			var fnext *fpNext
			if err == nil {
				fnext, err = fp.prepare(next)
			}
			if err == nil {
				if kept, err = install(log, &cfg, next, ws, off, gl, "reloaded", src.Describe()); err != nil {
					fp.abort(fnext)
				}
			}
			if err != nil {
				log.Error("reload failed, keeping the previous policy", "err", oneLine(err.Error()))
				d.reloaded(reloadRecord{at: time.Now(), err: oneLine(err.Error())})
				continue
			}
			d.reloaded(reloadRecord{at: time.Now(), ok: true, kept: kept})
			if ct := next.CtStateRules(); len(ct) > 0 && !ws[0].askedCt {
				log.Warn(fmt.Sprintf("rule(s) %s match ct-state, but the queues were bound without asking the kernel for connection states: every queued packet's state is unknown (limit and drop rules take it, accept rules do not) until a restart", strings.Join(ct, ", ")))
			}
			comp = next
			if err := fp.commit(fnext); err != nil {
				log.Error("fast path reload failed, keeping its previous program", "err", oneLine(err.Error()))
			}
		case <-ifTick.C:
			if !comp.InterfacesChanged() {
				continue
			}
			next, err := comp.Recompile()
			var fnext *fpNext
			if err == nil {
				fnext, err = fp.prepare(next)
			}
			if err == nil {
				if _, err = install(log, &cfg, next, ws, off, gl, "interfaces changed: rules recompiled", src.Describe()); err != nil {
					fp.abort(fnext)
				}
			}
			if err != nil {
				log.Error("interfaces changed, recompiling the policy failed: keeping the previous one", "err", oneLine(err.Error()))
				continue
			}
			comp = next
			if err := fp.commit(fnext); err != nil {
				log.Error("fast path reload failed, keeping its previous program", "err", oneLine(err.Error()))
			}
		case <-finished:
			break loop
		}
	}
	d.logStats(log, "final stats", time.Since(start), true)
	close(errs)
	return <-errs
}

// queueList formats queue numbers as the flag takes them: "0" or "0-3".
func queueList(qs []uint16) string {
	if len(qs) == 1 {
		return fmt.Sprint(qs[0])
	}
	return fmt.Sprintf("%d-%d", qs[0], qs[len(qs)-1])
}

func ruleNames(e *shaper.Engine) string {
	var names []string
	for i := 0; i < e.NumRules(); i++ {
		names = append(names, e.Rule(i).Name)
	}
	return strings.Join(names, ",")
}

// ifaceCheckEvery is how often the daemon looks whether an interface the
// rules name changed its index.
const ifaceCheckEvery = 2 * time.Second

// install hands each engine (one, serving every queue) a new engine for
// comp, made by Engine.Reload from its latest one, which the next queue to
// decide a batch swaps in (worker.decide) — a reload on SIGHUP, or a recompile after an
// interface changed. Rules whose name, match, key and limiter settings are
// unchanged keep their flows and limiter state (a global rule its leases),
// so it never grants a fresh burst; changed and new rules start empty;
// counters go on. On error nothing changes. With --offload, the flows in the
// kernel are released: the new rules may not drop them (they come back to
// the shaper, which offloads them again if its rules drop them in a row).
func install(log *slog.Logger, cfg *Config, comp *policy.Compiled, ws []*worker, off *offload.Offloader, gl *globals, msg, what string) (kept []string, err error) {
	if err := offloadable(cfg.Offload, comp); err != nil {
		return nil, err
	}
	// Check it whole before handing anything over, and before touching
	// the global rules' leases.
	if _, err := shaper.NewPolicy(cfg.policy(comp)); err != nil {
		return nil, err
	}
	pol, done, err := gl.prepare(cfg.policy(comp), comp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	engs := engines(ws)
	swapped := make([]<-chan struct{}, len(engs))
	for i, sh := range engs {
		k, ch, err := sh.install(func(base *shaper.Engine) (*shaper.Engine, []string, error) {
			return base.Reload(pol)
		})
		if err != nil {
			// Cannot happen (checked above).
			return nil, err
		}
		kept, swapped[i] = k, ch
	}
	// The global rules (and store) that only the previous policy used go
	// once every engine is the new one (or a later one), its queues have
	// stopped, or after swapWait at most.
	go waitSwapped(engs, swapped, swapWait, done)
	for _, wmsg := range comp.Warnings() {
		log.Warn(wmsg)
	}
	if off != nil {
		if err := off.Clear(); err != nil {
			log.Warn("offload: releasing the offloaded flows after the reload: " + oneLine(err.Error()))
		}
	}
	var names []string
	for _, r := range comp.Policy().Rules {
		names = append(names, r.Name)
	}
	log.Info(msg, "policy", what, "rules", strings.Join(names, ","), "kept_state", strings.Join(kept, ","))
	return kept, nil
}

// swapWait bounds how long a reload waits for the queues to swap its
// engine in before it lets the previous policy's global rules go (a queue
// swaps at its next batch or idle turn: well under a second).
const swapWait = 5 * time.Second

// waitSwapped calls done once each engine's swapped channel is closed (or
// its queues have stopped), or after wait: it waits on the channels, never
// by polling.
func waitSwapped(engs []*shared, swapped []<-chan struct{}, wait time.Duration, done func()) {
	t := time.NewTimer(wait)
	defer t.Stop()
	defer done()
	for i, sh := range engs {
		select {
		case <-swapped[i]:
		case <-sh.done:
		case <-t.C:
			return
		}
	}
}

// listenControl opens the control socket cfg asks for: nil without
// --control-socket, or when an optional one cannot be had (a warning says
// why). Its error is control.Listen's (*control.ListenError), with the
// flag's name as context.
func listenControl(cfg *Config, log *slog.Logger) (*net.UnixListener, error) {
	if cfg.ControlSocket == "" {
		return nil, nil
	}
	ln, err := control.Listen(cfg.ControlSocket)
	switch {
	case err != nil && cfg.ControlSocketOptional:
		log.Warn("no control socket (packetshaper status and flows will not reach this process): " + err.Error() + "; give each process its own --control-socket")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("--control-socket: %w", err)
	}
	return ln, nil
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
