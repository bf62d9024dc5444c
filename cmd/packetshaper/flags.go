package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// limiterFlags are the flags that the live shaper and replay share: what a
// flow is and how it is limited. Alone they make a one-rule policy (rule
// "default", matching every packet); with --policy FILE they are refused.
// Their names are the rule file's field names.
type limiterFlags struct {
	pps         float64
	bitrate     string
	burst       float64
	algo        string
	window      time.Duration
	key         string
	srcPrefix4  int
	dstPrefix4  int
	srcPrefix6  int
	dstPrefix6  int
	symmetric   bool
	maxFlows    int
	flowTimeout time.Duration
	shape       bool
	maxDelay    time.Duration
	global      bool
	globalSlack float64
	redis       string
	redisPwFile string
}

// addLimiterFlags defines the limiter flags on fs.
func addLimiterFlags(fs *flag.FlagSet) *limiterFlags {
	l := &limiterFlags{}
	fs.Float64Var(&l.pps, "pps", 0, "per-flow limit: `N` packets per second; fractions allowed (--pps 0.5 --window 10s is 5 per 10 s)")
	fs.StringVar(&l.bitrate, "bitrate", "", "per-flow limit: `RATE` in bits per second, tc-style: 500kbit, 10mbit, 1gbit (kbps/mbps are bytes per second, as in tc); a packet costs its IP length")
	fs.Float64Var(&l.burst, "burst", 0, "token bucket capacity in packets (with --bitrate: bytes); default 5 packets, or with --bitrate max(65535 bytes, 0.1 s of rate)")
	fs.StringVar(&l.algo, "algo", "token-bucket", "limiter: token-bucket, fixed-window, sliding-window (exact log, packets only) or sliding-window-counter; or leaky-bucket, the token bucket shaping (--shape)")
	fs.BoolVar(&l.shape, "shape", false, "shape instead of police (token bucket only): hold a packet over the limit until the rate allows it, up to --max-delay, and drop only what would wait longer")
	fs.DurationVar(&l.maxDelay, "max-delay", 0, "with --shape: the longest a packet is held (default 50ms, at most 10s); the queue holds burst + rate × max-delay")
	fs.DurationVar(&l.window, "window", time.Second, "window length of the window algorithms (windows align to multiples of it since the Unix epoch)")
	fs.StringVar(&l.key, "key", "5tuple", "what makes a flow: 5tuple, src, dst or src-dst (like hashlimit's --hashlimit-mode)")
	fs.IntVar(&l.srcPrefix4, "src-prefix4", 32, "IPv4 source prefix length a flow is keyed by (24 = one limit per /24)")
	fs.IntVar(&l.dstPrefix4, "dst-prefix4", 32, "IPv4 destination prefix length")
	fs.IntVar(&l.srcPrefix6, "src-prefix6", 128, "IPv6 source prefix length (64 = one limit per /64)")
	fs.IntVar(&l.dstPrefix6, "dst-prefix6", 128, "IPv6 destination prefix length")
	fs.BoolVar(&l.symmetric, "symmetric", false, "count both directions of a conversation as one flow")
	fs.IntVar(&l.maxFlows, "max-flows", flows.DefaultMaxFlows, "flow table cap (about 180 bytes per flow); when full, a flow seen once is evicted before any that keeps sending (see README, Flow table)")
	fs.DurationVar(&l.flowTimeout, "flow-timeout", 0, "forget a flow after this long without packets (default 1m, raised with a warning to what the limiter remembers of an idle flow when longer: burst / rate, the window, 2 windows for sliding-window-counter; one given shorter than that is refused)")
	fs.BoolVar(&l.global, "global", false, "one limit per flow key for every host running the rule, kept in --redis and taken in leases (token-bucket and fixed-window; see README, Global limits)")
	fs.Float64Var(&l.globalSlack, "global-slack", 0, "with --global: the fraction of the rate × 1 s that all hosts together may hold in leases of one key (default 0.01)")
	fs.StringVar(&l.redis, "redis", "", "with --global: the store, `host:port` (a Redis/Valkey server or primary), or several for a Redis Cluster")
	fs.StringVar(&l.redisPwFile, "redis-password-file", "", "with --redis: a `FILE` holding the store's password")
	return l
}

// limiterFlagNames are the flags addLimiterFlags defines.
func limiterFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addLimiterFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// file returns the one-rule policy the flags describe.
func (l *limiterFlags) file() *policy.File {
	r := policy.Rule{
		Name:        "default",
		Algo:        l.algo,
		Key:         l.key,
		SrcPrefix4:  &l.srcPrefix4,
		DstPrefix4:  &l.dstPrefix4,
		SrcPrefix6:  &l.srcPrefix6,
		DstPrefix6:  &l.dstPrefix6,
		Symmetric:   &l.symmetric,
		MaxFlows:    &l.maxFlows,
		Window:      policy.Duration(l.window),
		FlowTimeout: policy.Duration(l.flowTimeout),
		Bitrate:     l.bitrate,
	}
	if l.pps != 0 {
		r.PPS = &l.pps
	}
	if l.burst != 0 {
		r.Burst = &l.burst
	}
	if l.shape {
		r.Shape = &l.shape
	}
	if l.maxDelay != 0 {
		r.MaxDelay = policy.Duration(l.maxDelay)
	}
	f := &policy.File{Rules: []policy.Rule{r}}
	if l.global {
		r.Scope = "global"
		if l.globalSlack != 0 {
			r.GlobalSlack = &l.globalSlack
		}
	} else if l.globalSlack != 0 {
		r.GlobalSlack = &l.globalSlack // refused: only for global rules
	}
	f.Rules[0] = r
	if l.redis != "" || l.redisPwFile != "" {
		addrs := strings.Split(l.redis, ",")
		if l.redis == "" {
			addrs = nil
		}
		cluster := len(addrs) > 1
		f.Redis = &policy.Redis{Addrs: addrs, Cluster: &cluster, PasswordFile: l.redisPwFile}
	}
	return f
}

// flagError turns a policy error about the one-rule policy the flags make
// into the flags' words: "--burst: must be at least 1".
func flagError(err error) error {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Problem {
	case policy.ProblemNoLimit:
		return errors.New("no limit given: set --pps N or --bitrate RATE (or --policy FILE)")
	case policy.ProblemNeeds:
		if f, n := policy.Flag(pe.Field), policy.Flag(pe.Needs); f != "" && n != "" {
			return fmt.Errorf("--%s needs --%s", f, n)
		}
	case policy.ProblemMissing:
		// The flags make a [redis] table for --redis or
		// --redis-password-file: without --redis, its addrs are
		// missing.
		if n := policy.Flag(pe.Field); n != "" {
			return fmt.Errorf("--redis-password-file needs --%s host:port", n)
		}
	}
	if f := policy.Flag(pe.Field); f != "" {
		return fmt.Errorf("--%s: %s", f, pe.Msg)
	}
	return err
}

// policyFlags are the flags that choose the policy: --policy FILE or the
// limiter flags, and the settings beside the rules.
type policyFlags struct {
	fs        *flag.FlagSet
	limiter   *limiterFlags
	file      string
	malformed string
}

func addPolicyFlags(fs *flag.FlagSet) *policyFlags {
	p := &policyFlags{fs: fs, limiter: addLimiterFlags(fs)}
	fs.StringVar(&p.file, "policy", "", "read the rules from the TOML rule `FILE` (see README, Policies) instead of the limiter flags; live: SIGHUP re-reads it")
	fs.StringVar(&p.malformed, "malformed", "accept", "verdict for packets whose IP header is invalid (the kernel drops those anyway): accept or drop")
	return p
}

// policySource is where a policy comes from: the --policy file, re-read at
// each load (SIGHUP), or the limiter flags.
type policySource struct {
	file      string
	flags     *policy.File // without --policy
	malformed shaper.Verdict
	opts      policy.Options
}

// source checks the policy flags (after fs.Parse) and returns the source
// they name. Errors are one line, for exit status 2.
func (p *policyFlags) source(opts policy.Options) (*policySource, error) {
	s := &policySource{file: p.file, opts: opts}
	var err error
	if s.malformed, err = shaper.ParseVerdict(p.malformed); err != nil {
		return nil, fmt.Errorf("--malformed: %w", err)
	}
	limiter := limiterFlagNames()
	var given []string
	p.fs.Visit(func(f *flag.Flag) {
		if limiter[f.Name] {
			given = append(given, "--"+f.Name)
		}
	})
	if p.file != "" {
		if len(given) > 0 {
			return nil, fmt.Errorf("--policy and the limiter flags (%s) are exclusive: put the limits in the rule file", strings.Join(given, ", "))
		}
		return s, nil
	}
	s.flags = p.limiter.file()
	if err := s.flags.Validate(); err != nil {
		return nil, flagError(err)
	}
	return s, nil
}

// Load reads (for a file) and compiles the policy (daemon.Source).
func (s *policySource) Load() (*policy.Compiled, error) {
	_, c, err := s.loadFile()
	return c, err
}

// loadFile is Load that also returns the rule file as read (without
// --policy, the one-rule file the flags make).
func (s *policySource) loadFile() (*policy.File, *policy.Compiled, error) {
	f := s.flags
	if s.file != "" {
		var err error
		if f, err = policy.Load(s.file); err != nil {
			return nil, nil, err
		}
	}
	c, err := f.Compile(s.opts)
	if err != nil {
		if s.file == "" {
			return nil, nil, flagError(err)
		}
		return nil, nil, err
	}
	return f, c, nil
}

// Reloadable reports whether the policy comes from a file (daemon.Source).
func (s *policySource) Reloadable() bool { return s.file != "" }

// Describe names the source for logs (daemon.Source).
func (s *policySource) Describe() string {
	if s.file != "" {
		return s.file
	}
	return "command line"
}
