// Package daemon is the running shaper: one worker per NFQUEUE queue, each
// with its own engine, the fail-open monitor, the kernel offload, reloads on
// SIGHUP, the stats log and the metrics endpoint. The command
// (cmd/packetshaper) parses flags and wires a Config and a policy Source to
// Run.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/offload"
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

// Config is how the daemon runs. Queue is the template of every queue's
// nfq.Config (its Queue and Idle fields are set per queue).
type Config struct {
	Queues []uint16
	Queue  nfq.Config
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
	// MetricsAddr, if not empty, serves Prometheus metrics there.
	MetricsAddr string
	// Log receives every log line.
	Log *slog.Logger
}

// UsageError is an error in what the daemon was asked to do (a policy it
// cannot run as configured): the command exits 2 for it, 1 for others.
type UsageError struct{ error }

func (e UsageError) Unwrap() error { return e.error }

// Check reports whether c's policy can run with cfg: an engine can be made
// for it, and --offload is not combined with rules matching on metadata.
func Check(cfg *Config, c *policy.Compiled) error {
	if _, err := shaper.NewPolicy(cfg.policy(c)); err != nil {
		return UsageError{errors.New(trimPkg(err))}
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
	for _, w := range comp.Warnings() {
		log.Warn(w)
	}
	// The global rules' store: opened now, not waited for (a store that
	// is down makes them fall back); closed after the queues stopped.
	gl := newGlobals(log, len(cfg.Queues))
	defer gl.close()
	pol, _, err := gl.prepare(cfg.policy(comp), comp)
	if err != nil {
		return UsageError{fmt.Errorf("%s: %v", src.Describe(), err)}
	}
	var ws []*worker
	defer func() {
		for _, w := range ws {
			w.q.Close()
		}
	}()
	logf := func(format string, a ...any) { log.Warn(fmt.Sprintf(format, a...)) }
	for _, qn := range cfg.Queues {
		eng, err := shaper.NewPolicy(pol)
		if err != nil {
			return UsageError{errors.New(trimPkg(err))}
		}
		w := newWorker(qn, eng)
		qc := cfg.Queue
		qc.Queue, qc.Idle, qc.Logf = qn, w.idle, logf
		q, err := nfq.Open(qc)
		if err != nil {
			return err
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

	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "text/plain; version=0.0.4")
			writeMetrics(rw, ws, mon, off, gl)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}

	mode := "fail-open"
	if cfg.Queue.FailClosed {
		mode = "fail-closed"
	}
	log.Info("shaping", append([]any{"queues", queueList(cfg.Queues), "policy", src.Describe(), "rules", ruleNames(ws[0].eng),
		"queue_maxlen", cfg.Queue.MaxQueueLen, "copy_range", cfg.Queue.CopyRange, "mode", mode, "offload", cfg.Offload,
		"tables_max_mib", fmt.Sprintf("%.0f", float64(ws[0].eng.MaxBytes())*float64(len(ws))/(1<<20))}, gl.describe()...)...)

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
	if cfg.StatsEvery > 0 {
		t := time.NewTicker(cfg.StatsEvery)
		defer t.Stop()
		tick = t.C
	}
	latency := cfg.Queue.Latency
loop:
	for {
		select {
		case <-tick:
			logStats(log, "stats", ws, mon, off, gl, time.Since(start), latency)
		case <-hup:
			reload(log, &cfg, src, ws, gl)
		case <-finished:
			break loop
		}
	}
	logStats(log, "final stats", ws, mon, off, gl, time.Since(start), latency)
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

// reload re-reads the policy on SIGHUP and hands each worker a new engine
// made by Engine.Reload from its current one, which the worker's own
// goroutine swaps in at its next batch (worker.decide). Rules whose name,
// match, key and limiter settings are unchanged keep their flows and limiter
// state, so a reload never grants a fresh burst; changed and new rules start
// empty; counters go on. A bad file changes nothing.
func reload(log *slog.Logger, cfg *Config, src Source, ws []*worker, gl *globals) {
	if !src.Reloadable() {
		log.Warn("SIGHUP: no --policy file, nothing to reload")
		return
	}
	comp, err := src.Load()
	if err == nil {
		err = offloadable(cfg.Offload, comp)
	}
	if err == nil {
		// Check the policy before touching the global rules' leases.
		_, err = shaper.NewPolicy(cfg.policy(comp))
	}
	var pol shaper.Policy
	var done func()
	if err == nil {
		if pol, done, err = gl.prepare(cfg.policy(comp), comp); err != nil {
			err = fmt.Errorf("%s: %v", src.Describe(), err)
		}
	}
	if err == nil {
		engs := make([]*shaper.Engine, len(ws))
		var kept []string
		for i, w := range ws {
			if engs[i], kept, err = w.cur.Load().Reload(pol); err != nil {
				break
			}
		}
		if err == nil {
			for i, w := range ws {
				w.pending.Store(engs[i])
			}
			// The global rules (and store) the old policy alone used
			// go once every queue runs the new one.
			go func() {
				deadline := time.Now().Add(5 * time.Second)
				for _, w := range ws {
					for w.pending.Load() != nil && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
				}
				done()
			}()
			for _, wmsg := range comp.Warnings() {
				log.Warn(wmsg)
			}
			log.Info("reloaded", "policy", src.Describe(), "rules", ruleNames(engs[0]), "kept_state", strings.Join(kept, ","))
			return
		}
		// Cannot happen (checked above): the old engines stay, with
		// the global rules they use, which are left open.
	}
	log.Error("reload failed, keeping the previous policy", "err", oneLine(err.Error()))
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// trimPkg drops the "shaper: " / "flows: " prefix that package errors carry.
func trimPkg(err error) string {
	s := err.Error()
	for _, p := range []string{"shaper: ", "flows: "} {
		if len(s) > len(p) && s[:len(p)] == p {
			return s[len(p):]
		}
	}
	return s
}
