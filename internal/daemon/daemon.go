// Package daemon is the running shaper: one worker per NFQUEUE queue, all
// deciding with one engine (so that a key is limited once whichever queue
// its packets arrive on), the fail-open monitor, the kernel offload, reloads on
// SIGHUP, the stats log, the metrics endpoint and the control socket
// (package internal/control). The command (cmd/packetshaper) parses flags and
// wires a Config and a policy Source to Run.
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/packetshaper/packetshaper/internal/control"
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

// Part names a part of the daemon that an error is about. The daemon's
// errors name what failed, never a flag: the command, which knows which of
// its flags configures each part, may say that instead (PartError).
type Part string

// The parts a PartError names.
const (
	PartFastpath         Part = "fast path"
	PartFastpathRequired Part = "fast path (required)"
	PartOffload          Part = "kernel offload"
	PartRealtime         Part = "real-time priority"
	PartMetrics          Part = "metrics endpoint"
	PartControl          Part = "control socket"
)

// Parts are every Part, for the command's table of their flags.
var Parts = []Part{PartFastpath, PartFastpathRequired, PartOffload, PartRealtime, PartMetrics, PartControl}

// PartError is an error of one part of the daemon: "PART: ERR", or ERR
// alone when it starts with the part's name already.
type PartError struct {
	Part Part
	Err  error
}

func (e *PartError) Error() string {
	if m := e.Err.Error(); strings.HasPrefix(m, string(e.Part)) {
		return m
	}
	return string(e.Part) + ": " + e.Err.Error()
}
func (e *PartError) Unwrap() error { return e.Err }

// Check reports whether c's policy can run with cfg: an engine can be made
// for it, and the offload is not combined with rules matching on metadata.
func Check(cfg *Config, c *policy.Compiled) error {
	if _, err := shaper.NewPolicy(cfg.policy(c)); err != nil {
		return UsageError{err}
	}
	if cfg.Offload && len(cfg.Fastpath.Ifaces) > 0 {
		return UsageError{&PartError{PartOffload, errOffloadFastpath}}
	}
	return offloadable(cfg.Offload, c)
}

// errOffloadFastpath: the offload and the fast path are not combined. Where
// the fast path runs it holds its rules' flows in the kernel from their
// first packet, and its divert rule queues only what it punts; the
// offload's nft sets would need a second queue rule of their own beside it
// (docs/architecture.md, "The nft offload beside the fast path").
var errOffloadFastpath = errors.New("not with the fast path, which holds its rules' flows in the kernel itself; the offload serves hosts where the fast path cannot run")

// policy is c's engine policy with the daemon's settings beside the rules.
func (cfg *Config) policy(c *policy.Compiled) shaper.Policy {
	p := c.Policy()
	p.Malformed = cfg.Malformed
	if cfg.Offload {
		p.OffloadAfter = cfg.OffloadAfter
	}
	return p
}

// offloadable refuses the offload with a policy whose rules match on a
// packet's mark, interfaces or queue: the kernel drops an offloaded flow by
// its 5-tuple alone, and would drop packets of that 5-tuple that such a
// rule tells apart (and might accept).
func offloadable(offload bool, c *policy.Compiled) error {
	if r := c.MetaRules(); offload && len(r) > 0 {
		return UsageError{&PartError{PartOffload, fmt.Errorf("rule %q matches on mark, interface or queue, which the kernel's offload (by 5-tuple alone) cannot tell apart; turn the offload off or drop those match keys", r[0])}}
	}
	return nil
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

// install hands the engine sh (the one serving every queue) a new engine
// for comp, made by Engine.Reload from its latest one, which the next queue
// to decide a batch swaps in (worker.decide): daemon.reload's last step. Rules whose name, match, key and limiter settings are
// unchanged keep their flows and limiter state (a global rule its leases),
// so it never grants a fresh burst; changed and new rules start empty;
// counters go on. On error nothing changes. With the offload, the flows in the
// kernel are released: the new rules may not drop them (they come back to
// the shaper, which offloads them again if its rules drop them in a row).
func install(log *slog.Logger, cfg *Config, comp *policy.Compiled, sh *shared, off *offload.Offloader, gl *globals, msg, what string) (kept []string, err error) {
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
	kept, swapped, err := sh.install(func(base *shaper.Engine) (*shaper.Engine, []string, error) {
		return base.Reload(pol)
	})
	if err != nil {
		// Cannot happen (checked above).
		return nil, err
	}
	// The global rules (and store) that only the previous policy used go
	// once the engine is the new one (or a later one), its queues have
	// stopped, or after swapWait at most.
	go waitSwapped(sh, swapped, swapWait, done)
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

// waitSwapped calls done once sh's swapped channel is closed (or its
// queues have stopped), or after wait: it waits on the channels, never by
// polling.
func waitSwapped(sh *shared, swapped <-chan struct{}, wait time.Duration, done func()) {
	t := time.NewTimer(wait)
	defer t.Stop()
	defer done()
	select {
	case <-swapped:
	case <-sh.done:
	case <-t.C:
	}
}

// listenControl opens the control socket cfg asks for: nil without
// ControlSocket, or when an optional one cannot be had (a warning says
// why). Its error is control.Listen's (*control.ListenError) in a
// PartError.
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
		return nil, &PartError{PartControl, err}
	}
	return ln, nil
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
