package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/failopen"
	"github.com/packetshaper/packetshaper/internal/offload"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// nfqQueue is what the daemon needs of an nfq.Queue (tests use fakes).
type nfqQueue interface {
	Run(ctx context.Context, fn nfq.Handler) error
	Close() error
	Stats() nfq.Stats
	KernelStats() (nfq.KernelStats, error)
	PortID() uint32
	Latency() nfq.LatencyStats
	LatencyHistogram(bounds []time.Duration) nfq.LatencyHistogram
	LateHistogram(bounds []time.Duration) nfq.LatencyHistogram
	Wake()
	HoldRoom() int
	HoldStats() nfq.HoldStats
}

var _ nfqQueue = (*nfq.Queue)(nil)

// failOpen is what the daemon needs of the failopen.Monitor.
type failOpen interface {
	Stats(queue uint16) failopen.FailOpenStats
	Total() failopen.FailOpenStats
}

var _ failOpen = (*failopen.Monitor)(nil)

// daemon is one run of the shaper, a small lifecycle: open makes its parts
// in order (the global rules' store, the engine, the queues, the fast
// path, the fail-open monitor, the offload, the metrics endpoint, the
// control socket), each step pushing what undoes it; run shapes until the
// queues stop; close undoes what open made, in reverse order. A step that
// fails has open undo the steps before it.
type daemon struct {
	cfg  Config
	log  *slog.Logger
	logf func(format string, a ...any)
	src  Source
	comp *policy.Compiled // the policy in force
	rl   reloader

	gl  *globals
	sh  *shared // the one engine, serving every queue (sh.ws)
	qs  []*nfq.Queue
	fp  *fastPath // nil without a fast path
	mon *failopen.Monitor
	off *offload.Offloader // nil without the offload
	st  *state

	// metricsAt, controlAt: what the start line says is served (the
	// address and socket in use, or "off").
	metricsAt, controlAt string
	// undo: what each step of open made, undone by close from the last.
	undo []func()
}

// Run binds the queues and shapes until ctx is cancelled (a clean stop:
// every held packet is answered), reloading the policy from src on each
// value of hup. comp is the policy src gave at startup, checked by Check.
// It returns nil after a clean stop; its errors are one line (UsageError
// for a policy it cannot run; PartError names the part that failed).
func Run(ctx context.Context, cfg Config, src Source, comp *policy.Compiled, hup <-chan os.Signal) error {
	d, err := open(cfg, src, comp)
	if err != nil {
		return err
	}
	defer d.close()
	return d.run(ctx, hup)
}

// open makes the daemon's parts, step by step; on an error it undoes the
// steps done and returns it.
func open(cfg Config, src Source, comp *policy.Compiled) (*daemon, error) {
	if err := Check(&cfg, comp); err != nil {
		return nil, err
	}
	d := &daemon{cfg: cfg, log: cfg.Log, src: src, comp: comp, rl: reloader{src: src}, metricsAt: "off", controlAt: "off"}
	d.logf = func(format string, a ...any) { d.log.Warn(fmt.Sprintf(format, a...)) }
	for _, step := range []func() error{
		d.openEngine, d.setRealtime, d.openQueues, d.openFastpath,
		d.openMonitor, d.openOffload, d.openMetrics, d.openControl,
	} {
		if err := step(); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// onClose pushes what undoes the step just done.
func (d *daemon) onClose(f func()) { d.undo = append(d.undo, f) }

// close undoes open's steps, the last first: the control socket and the
// metrics endpoint go, the offloaded flows are deleted, the monitor stops,
// the fast path is detached, the queues close, the store last.
func (d *daemon) close() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
}

// openEngine opens the global rules' store (not waited for: a store that
// is down makes them fall back) and makes the one engine: the kernel
// spreads a key's packets over the queues (--queue-balance hashes
// addresses and protocol), and the key has one bucket.
func (d *daemon) openEngine() error {
	d.gl = newGlobals(d.log)
	d.onClose(d.gl.close)
	pol, _, err := d.gl.prepare(d.cfg.policy(d.comp), d.comp)
	if err != nil {
		return UsageError{fmt.Errorf("%s: %w", d.src.Describe(), err)}
	}
	eng, err := shaper.NewPolicy(pol)
	if err != nil {
		return UsageError{err}
	}
	d.sh = newEngine(d.cfg.Queues, eng)
	return nil
}

// setRealtime sets the real-time policy: once for the whole process,
// before the queues open (threads the runtime starts later inherit it).
func (d *daemon) setRealtime() error {
	p := d.cfg.RealtimePriority
	if p == 0 {
		return nil
	}
	if p < 0 || p > MaxRealtimePriority {
		return UsageError{&PartError{PartRealtime, fmt.Errorf("%d out of range (1..%d, or 0 for none)", p, MaxRealtimePriority)}}
	}
	if err := setProcessRealtime(p); err != nil {
		return &PartError{PartRealtime, err}
	}
	return nil
}

// openQueues binds every queue, each served by its worker.
func (d *daemon) openQueues() error {
	d.onClose(func() {
		for _, q := range d.qs {
			q.Close()
		}
	})
	for _, w := range d.sh.ws {
		w.failClosed = d.cfg.Queue.FailClosed
		qc := d.cfg.Queue
		qc.Queue, qc.Idle, qc.Logf = w.queue, w.idle, d.logf
		qc.Conntrack = qc.Conntrack || len(d.comp.CtStateRules()) > 0
		q, err := nfq.Open(qc)
		if err != nil {
			return err
		}
		w.q, w.conntrack, w.askedCt = q, q.Conntrack(), qc.Conntrack
		d.qs = append(d.qs, q)
	}
	d.sh.wake = func() {
		for _, q := range d.qs {
			q.Wake()
		}
	}
	// The policy's warnings once it runs (a start that fails says one
	// line: its error).
	for _, w := range d.comp.Warnings() {
		d.log.Warn(w)
	}
	return nil
}

// openFastpath attaches the kernel fast path, once the queues are bound
// (detached before they close), and warns of divert rules that send to
// queues nobody serves, or that do not suit the fast path.
func (d *daemon) openFastpath() error {
	fp, err := startFastpath(d.log, d.cfg.Fastpath, d.comp)
	if err != nil {
		return err
	}
	if fp != nil {
		d.fp = fp
		d.onClose(fp.close)
		for _, w := range d.sh.ws {
			w.punt = fp.puntMark()
		}
		d.sh.fast.Store(&fastCounts{get: fp.counts, total: fp.totalCounts})
	}
	if rules, err := failopen.QueueRules(); err == nil {
		bound, _ := nfq.BoundQueues()
		for _, u := range failopen.UnservedQueues(rules, bound) {
			d.log.Warn(u.String())
		}
		if fp != nil {
			for _, h := range fastpathRuleHints(rules, d.cfg.Queues) {
				d.log.Warn(h)
			}
		}
	}
	return nil
}

// openMonitor makes the fail-open monitor of the queues (run by run).
func (d *daemon) openMonitor() error {
	mon, err := failopen.NewMonitor(d.qs, failopen.MonitorConfig{Logger: d.log})
	if err != nil {
		return err
	}
	d.mon = mon
	d.onClose(func() { mon.Close() })
	return nil
}

// openOffload opens the kernel offload if asked; close deletes every
// element still live. Then the daemon's state is complete, for the
// metrics and the control socket.
func (d *daemon) openOffload() error {
	if d.cfg.Offload {
		off, err := offload.Open(offload.Config{Timeout: d.cfg.OffloadTimeout, Logf: d.logf})
		if err != nil {
			return &PartError{PartOffload, err}
		}
		d.off = off
		d.onClose(func() {
			if err := off.Close(); err != nil {
				d.log.Warn("offload: removing the offloaded flows: " + oneLine(err.Error()))
			}
		})
		d.sh.off = off
	}
	start := time.Now()
	d.st = &state{cfg: &d.cfg, sh: d.sh, mon: d.mon, off: d.off, gl: d.gl, fp: d.fp, policy: d.src.Describe(), start: start, loaded: start}
	return nil
}

// openMetrics serves the metrics at cfg.MetricsAddr, if any.
func (d *daemon) openMetrics() error {
	if d.cfg.MetricsAddr == "" {
		return nil
	}
	h, err := metricsHandler(d.st)
	if err != nil {
		return &PartError{PartMetrics, err}
	}
	ln, err := net.Listen("tcp", d.cfg.MetricsAddr)
	if err != nil {
		return &PartError{PartMetrics, err}
	}
	srv := serveMetrics(ln, h)
	d.onClose(func() { srv.Close() })
	d.metricsAt = "http://" + ln.Addr().String() + "/metrics"
	return nil
}

// openControl serves the control socket, if any; close ends the listings
// in progress and removes the file.
func (d *daemon) openControl() error {
	ln, err := listenControl(&d.cfg, d.log)
	if ln == nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		control.Serve(ctx, ln, d.st, d.logf)
		close(served)
	}()
	d.onClose(func() { cancel(); <-served })
	d.controlAt = d.cfg.ControlSocket
	return nil
}
