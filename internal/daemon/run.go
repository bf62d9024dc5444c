package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
)

// run says what it serves, runs the monitor and every queue, and loops
// until the queues have stopped (ctx cancelled, or one failed): the stats
// line every StatsEvery, a reload on each value of hup, a recompile when
// an interface the rules name changed. It returns a queue's error, if one
// failed.
func (d *daemon) run(ctx context.Context, hup <-chan os.Signal) error {
	d.logStart()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go d.mon.Run(runCtx)
	finished, errs := d.runQueues(runCtx, cancel)

	var tick <-chan time.Time
	if d.cfg.StatsEvery > 0 {
		t := time.NewTicker(d.cfg.StatsEvery)
		defer t.Stop()
		tick = t.C
	}
	// Interface names are resolved to indexes at compile: look for
	// interfaces re-created (a new index), come or gone.
	ifTick := time.NewTicker(ifaceCheckEvery)
	defer ifTick.Stop()
	stopped := false
	for !stopped {
		select {
		case <-tick:
			d.st.logStats(d.log, "stats", time.Since(d.st.start), false)
		case <-hup:
			if !d.src.Reloadable() {
				// Not a reload: logged, not counted (a failed
				// reload would set last_reload_successful 0).
				d.log.Warn("SIGHUP: the policy is not a file, nothing to reload: ignored")
				continue
			}
			stopped = d.reload(sighup(&d.rl), finished)
		case <-ifTick.C:
			if d.comp.InterfacesChanged() {
				stopped = d.reload(ifaceChange(d.comp), finished)
			}
		case <-finished:
			stopped = true
		}
	}
	d.st.logStats(d.log, "final stats", time.Since(d.st.start), true)
	close(errs)
	return <-errs
}

// logStart is the start line: what is shaped, by which rules, and what is
// served.
func (d *daemon) logStart() {
	mode := "fail-open"
	if d.cfg.Queue.FailClosed {
		mode = "fail-closed"
	}
	eng := d.sh.eng
	d.log.Info("shaping", append([]any{"queues", nfq.FormatQueues(d.cfg.Queues), "policy", d.src.Describe(),
		"rule_count", eng.NumRules(), "rules", ruleNames(eng),
		"metrics", d.metricsAt, "control_socket", d.controlAt,
		"queue_maxlen", d.cfg.Queue.MaxQueueLen, "copy_range", d.cfg.Queue.CopyRange, "mode", mode, "offload", d.cfg.Offload,
		"max_held", d.sh.ws[0].q.HoldStats().MaxHeld,
		"tables_max_mib", fmt.Sprintf("%.0f", float64(eng.MaxBytes())/(1<<20)),
		"kernel_maps_mib", d.fp.kernelMapsMiB()}, d.gl.describe()...)...)
}

// runQueues runs every queue's reader on its goroutine; finished is
// closed once all have returned, errs holds their errors (one failing
// stops all).
func (d *daemon) runQueues(ctx context.Context, cancel func()) (finished chan struct{}, errs chan error) {
	errs = make(chan error, len(d.sh.ws))
	var wg sync.WaitGroup
	for _, w := range d.sh.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.q.Run(ctx, w.decide)
			w.stop(time.Now().UnixNano()) // the final snapshot
			if err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	finished = make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	return finished, errs
}

// A cause is why the daemon reloads: what gives the next policy, and what
// the log and the status say of it.
type cause struct {
	// load gives the next policy, waiting at most until stop is closed
	// (stopped: the queues have stopped, nothing is reloaded).
	load func(stop <-chan struct{}) (next *policy.Compiled, stopped bool, err error)
	// done is the log message of a reload that took, failed of one that
	// did not.
	done, failed string
	// counted: the reload is counted in the status and the metrics (a
	// SIGHUP's is; a recompile is not a reload the operator asked for).
	counted bool
}

// sighup is the cause of a SIGHUP: the policy file read again (by rl: off
// the main loop, bounded by reloadTimeout).
func sighup(rl *reloader) cause {
	return cause{load: rl.load, done: "reloaded", failed: "reload failed, keeping the previous policy", counted: true}
}

// ifaceChange is the cause of an interface the rules of comp name that
// changed its index, came or went: comp recompiled.
func ifaceChange(comp *policy.Compiled) cause {
	return cause{
		load: func(<-chan struct{}) (*policy.Compiled, bool, error) {
			next, err := comp.Recompile()
			return next, false, err
		},
		done:   "interfaces changed: rules recompiled",
		failed: "interfaces changed, recompiling the policy failed: keeping the previous one",
	}
}

// reload is the one way the policy in force changes, whatever the cause:
// the next policy is loaded, the kernel's program prepared (one it refuses
// fails the whole reload: both paths keep the previous policy), the
// engine's installed, then the kernel's swapped in. It reports whether the
// queues stopped meanwhile.
func (d *daemon) reload(c cause, stop <-chan struct{}) (stopped bool) {
	next, stopped, err := c.load(stop)
	if stopped {
		return true
	}
	var kept []string
	var fnext *fpNext
	if err == nil {
		fnext, err = d.fp.prepare(next)
	}
	if err == nil {
		if kept, err = install(d.log, &d.cfg, next, d.sh, d.off, d.gl, c.done, d.src.Describe()); err != nil {
			d.fp.abort(fnext)
		}
	}
	if err != nil {
		d.log.Error(c.failed, "err", oneLine(err.Error()))
		if c.counted {
			d.st.reloaded(reloadRecord{at: time.Now(), err: oneLine(err.Error())})
		}
		return false
	}
	if c.counted {
		d.st.reloaded(reloadRecord{at: time.Now(), ok: true, kept: kept})
	}
	if ct := next.CtStateRules(); len(ct) > 0 && !d.sh.ws[0].askedCt {
		d.log.Warn(fmt.Sprintf("rule(s) %s match ct-state, but the queues were bound without asking the kernel for connection states: every queued packet's state is unknown (limit and drop rules take it, accept rules do not) until a restart", strings.Join(ct, ", ")))
	}
	d.comp = next
	if err := d.fp.commit(fnext); err != nil {
		d.log.Error("fast path reload failed, keeping its previous program", "err", oneLine(err.Error()))
	}
	return false
}
