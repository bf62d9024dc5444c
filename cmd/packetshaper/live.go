package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/daemon"
	"github.com/packetshaper/packetshaper/internal/fastpath"
	"github.com/packetshaper/packetshaper/internal/offload"
	"github.com/packetshaper/packetshaper/internal/term"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

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
	controlSocket  string
	latency        bool
	rtPrio         int
	offload        bool
	offloadAfter   uint
	offloadTimeout time.Duration
	maxHeld        int
	fastpath       []string
	fastRequired   bool
	fastAttach     string
}

func addLiveFlags(fs *pflag.FlagSet) *liveFlags {
	f := &liveFlags{}
	fs.StringVar(&f.queue, "queue", "0", "NFQUEUE number `N`, or a range N-M: one reader per queue, all sharing one engine, so a key has one bucket whichever queue its packets reach (rule: rules.sh --queue N-M, iptables --queue-balance N:M)")
	fs.UintVar(&f.maxLen, "queue-maxlen", nfq.DefaultMaxQueueLen, "packets the kernel holds per queue waiting for a verdict; beyond it packets fail open (or are dropped with --fail-closed)")
	fs.UintVar(&f.copyRange, "copy-range", nfq.DefaultCopyRange, "bytes of each packet copied from the kernel, from the IP header (enough for the headers; --bitrate charges the packet's real length, from its IP header or the kernel, whatever was copied)")
	fs.IntVar(&f.readBuffer, "read-buffer", nfq.DefaultReadBuffer, "netlink socket receive buffer in `bytes` per queue")
	fs.IntVar(&f.batch, "batch", nfq.DefaultBatchSize, "most packets read and answered at once (batches never wait to fill)")
	fs.BoolVar(&f.failClosed, "fail-closed", false, "drop packets that find the queue full instead of accepting them")
	fs.DurationVar(&f.statsEvery, "stats-interval", 10*time.Second, "log a stats line this often (0: only the final one at exit)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.BoolVar(&f.latency, "latency", false, "measure each packet's verdict latency (from entering the network stack to its verdict) and log p50/p99/max; turns on kernel receive timestamps system-wide")
	fs.IntVar(&f.rtPrio, "rt-priority", 0, "run the whole process under the real-time policy SCHED_FIFO at this `priority` (1-99, 1 is enough): keeps the verdict latency's tail low when other processes load the CPUs; needs root or CAP_SYS_NICE (0: off)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics, e.g. 127.0.0.1:9464 or a management address; they reveal traffic volumes, rule names and drop counts to whoever can reach ADDR: bind to loopback or firewall it (see docs/metrics.md)")
	fs.StringVar(&f.controlSocket, "control-socket", control.DefaultPath("0"), "the control socket `PATH` for packetshaper status and flows (root only, mode 0600); by default packetshaper-N[-M].sock for --queue N[-M] other than 0; each process needs its own; \"\" for none")
	fs.IntVar(&f.maxHeld, "max-held", nfq.DefaultMaxHeld, "with shaping rules: the most packets held per queue for a later verdict, at most half of --queue-maxlen (default 1024, or a quarter of --queue-maxlen if less); a packet a shaping rule would delay beyond it is dropped (shape_overflow); 0: none held")
	fs.BoolVar(&f.offload, "offload", false, "hold a flow that keeps being dropped to its rule's limit in the kernel, so that its flood never fills the queue: the kernel drops what is over the limit, the rest still comes to the queue (needs the offload sets and rules: scripts/rules.sh add ... --offload; not with --fastpath, which holds its rules' flows in the kernel itself)")
	fs.UintVar(&f.offloadAfter, "offload-after", 1000, "with --offload: offload a flow after this many of its packets in a row were dropped")
	fs.DurationVar(&f.offloadTimeout, "offload-timeout", offload.DefaultTimeout, "with --offload: how long the kernel holds an offloaded flow to its limit after the last of its packets it dropped (refreshed while it drops some and packetshaper runs), at most 10s: nothing installed outlives packetshaper longer")
	fs.StringSliceVar(&f.fastpath, "fastpath", nil, "run the rules the kernel can enforce in an eBPF program at tcx (or tc: --fastpath-attach) ingress of `IFACE[,IFACE...]`; the other rules' packets reach the queue with the punt mark 0x40000000 (divert rule: scripts/rules.sh add --fastpath --queue N); packetshaper check --fastpath says which rules run where (docs/fastpath.md)")
	fs.BoolVar(&f.fastRequired, "fastpath-required", false, "with --fastpath: exit 1 if the kernel refuses the program, instead of running the whole policy through NFQUEUE")
	fs.StringVar(&f.fastAttach, "fastpath-attach", string(fastpath.AttachAuto), "with --fastpath: how the program is attached: auto (tcx, or tc where the kernel has no tcx: a probe), tcx (kernel 6.6+; a SIGKILL detaches it) or tc (a clsact qdisc and a cls_bpf filter, pref 0x5053 \"packetshaper-PID\"; removed on a clean stop, and a SIGKILL's leftover at the next start)")
	return f
}

// parseQueues is --queue's value (nfq.ParseQueues), its error naming the flag.
func parseQueues(s string) ([]uint16, error) {
	qs, err := nfq.ParseQueues(s)
	if err != nil {
		return nil, fmt.Errorf("--queue: %w", err)
	}
	return qs, nil
}

// newLiveCmd is the root command, the live shaper.
func newLiveCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "packetshaper [--queue N|N-M] [--policy FILE | limiter flags] [flags]",
		Short: "per-flow packet shaper for Linux (NFQUEUE) and for captures",
		Long:  help("live"),
		Example: `  sudo scripts/rules.sh add --queue 0 --proto udp --dport 9000
  sudo packetshaper --queue 0 --pps 100
  sudo packetshaper --queue 0-3 --policy /etc/packetshaper/policy.toml --metrics-addr 127.0.0.1:9464`,
	}
	live := pflag.NewFlagSet("live", pflag.ContinueOnError)
	f := addLiveFlags(live)
	clihelp.AddGroup(cmd.Flags(), "", live)
	pf := addPolicyFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return c.exit(runLive(cmd.Flags(), pf, f, c.stderr))
	}
	return cmd
}

// runLive is the root command: exit status 0 after a clean stop, 1 when the
// queue cannot be bound or fails, 2 on bad usage; a runtime fault ends it
// by SIGABRT (crashOnFault), never by 2.
func runLive(fs *pflag.FlagSet, pf *policyFlags, f *liveFlags, stderr io.Writer) int {
	crashOnFault()
	// SIGHUP reloads --policy; caught from here on, so that it never kills
	// the process (its default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "packetshaper: "+format+"\n", a...)
		return 2
	}
	src, err := pf.source(policy.Options{IfIndex: ifIndex})
	if err != nil {
		return usage("%v", err)
	}
	comp, err := src.Load()
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
	case f.rtPrio < 0 || f.rtPrio > daemon.MaxRealtimePriority:
		return usage("--rt-priority must be between 0 (off) and %d, not %d", daemon.MaxRealtimePriority, f.rtPrio)
	case f.batch < 1 || f.batch > 1024:
		return usage("--batch must be between 1 and 1024, not %d", f.batch)
	case f.statsEvery < 0:
		return usage("--stats-interval must not be negative, not %v", f.statsEvery)
	case f.offload && (f.offloadAfter < 1 || f.offloadAfter > 1<<31):
		return usage("--offload-after must be between 1 and %d, not %d", 1<<31, f.offloadAfter)
	case f.offload && (f.offloadTimeout < time.Second/10 || f.offloadTimeout > offload.MaxTimeout):
		return usage("--offload-timeout must be between 100ms and %v, not %v", offload.MaxTimeout, f.offloadTimeout)
	case flagGiven(fs, "max-held") && (f.maxHeld < 0 || f.maxHeld > nfq.MaxMaxHeld || f.maxHeld > int(f.maxLen/2)):
		return usage("--max-held must be between 0 and half of --queue-maxlen (%d, at most %d), not %d: held packets must never fill the queue", f.maxLen/2, nfq.MaxMaxHeld, f.maxHeld)
	}
	// Not given: nfq's default (1024, or a quarter of --queue-maxlen);
	// 0: none.
	maxHeld := f.maxHeld
	if !flagGiven(fs, "max-held") {
		maxHeld = 0
	} else if maxHeld == 0 {
		maxHeld = -1
	}
	var log *slog.Logger
	switch f.logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(term.LogWriter(stderr), nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		return usage("--log-format must be text or json, not %q", f.logFormat)
	}
	if f.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(f.metricsAddr); err != nil {
			return usage("--metrics-addr: %v (want HOST:PORT, e.g. 127.0.0.1:9464)", err)
		}
	}
	// The default control socket: one of its own for each --queue, and
	// if another process holds it, the shaper runs without one (logged).
	// A path given must work.
	socket, socketOptional := f.controlSocket, !fs.Changed("control-socket")
	if socketOptional {
		socket = control.DefaultPath(nfq.FormatQueues(queues))
	}
	cfg := daemon.Config{
		Queues: queues,
		Queue: nfq.Config{
			MaxQueueLen: uint32(f.maxLen),
			CopyRange:   uint32(f.copyRange),
			FailClosed:  f.failClosed,
			ReadBuffer:  f.readBuffer,
			BatchSize:   f.batch,
			Latency:     f.latency,
			MaxHeld:     maxHeld,
		},
		RealtimePriority:      f.rtPrio,
		Malformed:             src.malformed,
		Offload:               f.offload,
		OffloadAfter:          uint32(f.offloadAfter),
		OffloadTimeout:        f.offloadTimeout,
		StatsEvery:            f.statsEvery,
		MetricsAddr:           f.metricsAddr,
		ControlSocket:         socket,
		ControlSocketOptional: socketOptional,
		Version:               buildVersion(),
		Log:                   log,
		Fastpath:              daemon.FastpathConfig{Ifaces: f.fastpath, Required: f.fastRequired},
	}
	if f.fastRequired && len(f.fastpath) == 0 {
		return usage("--fastpath-required needs --fastpath IFACE")
	}
	attach, err := fastpath.ParseAttachMode(f.fastAttach)
	if err != nil {
		return usage("--fastpath-attach: %v", err)
	}
	if attach != fastpath.AttachAuto && len(f.fastpath) == 0 {
		return usage("--fastpath-attach needs --fastpath IFACE")
	}
	cfg.Fastpath.Attach = attach
	if err := daemon.Check(&cfg, comp); err != nil {
		return usage("%s", daemonError(err))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, src, comp, hup); err != nil {
		var ue daemon.UsageError
		if errors.As(err, &ue) {
			return usage("%s", daemonError(err))
		}
		fmt.Fprintln(stderr, "packetshaper:", daemonError(err))
		return 1
	}
	return 0
}

// daemonFlags is the flag that configures each part of the daemon, which
// its errors name (daemon.PartError).
var daemonFlags = map[daemon.Part]string{
	daemon.PartFastpath: "--fastpath", daemon.PartFastpathRequired: "--fastpath-required",
	daemon.PartOffload: "--offload", daemon.PartRealtime: "--rt-priority",
	daemon.PartMetrics: "--metrics-addr", daemon.PartControl: "--control-socket",
}

// daemonError is err on one line, the flag of the part that failed in
// place of the part's name.
func daemonError(err error) string {
	var pe *daemon.PartError
	if errors.As(err, &pe) {
		if f, ok := daemonFlags[pe.Part]; ok {
			return f + ": " + oneLine(pe.Err.Error())
		}
	}
	return oneLine(err.Error())
}

// crashOnFault makes a runtime fault of the live shaper (a panic nothing
// recovers, a fatal error such as running out of memory) end the process
// by SIGABRT (GOTRACEBACK=crash, with every goroutine's trace on stderr)
// rather than Go's exit status 2, which is bad configuration's: the unit's
// RestartPreventExitStatus=2 then keeps only a configuration error from
// being restarted (issue 29: a panic in the store's client exited 2 and
// systemd never restarted it).
func crashOnFault() { debug.SetTraceback("crash") }

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *pflag.FlagSet, name string) bool { return fs.Changed(name) }

// ifIndex resolves an interface name in packetshaper's network namespace.
func ifIndex(name string) (uint32, bool) {
	i, err := net.InterfaceByName(name)
	if err != nil {
		return 0, false
	}
	return uint32(i.Index), true
}
