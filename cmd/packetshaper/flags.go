package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// limiterFlags are the flags that the live shaper and replay share: what a
// flow is and how it is limited.
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
	malformed   string
}

// addLimiterFlags defines the limiter flags on fs.
func addLimiterFlags(fs *flag.FlagSet) *limiterFlags {
	l := &limiterFlags{}
	fs.Float64Var(&l.pps, "pps", 0, "per-flow limit: `N` packets per second; fractions allowed (--pps 0.5 --window 10s is 5 per 10 s)")
	fs.StringVar(&l.bitrate, "bitrate", "", "per-flow limit: `RATE` in bits per second, tc-style: 500kbit, 10mbit, 1gbit (kbps/mbps are bytes per second, as in tc); a packet costs its IP length")
	fs.Float64Var(&l.burst, "burst", 0, "token bucket capacity in packets (with --bitrate: bytes); default 5 packets, or with --bitrate max(65535 bytes, 0.1 s of rate)")
	fs.StringVar(&l.algo, "algo", "token-bucket", "limiter: token-bucket, fixed-window, sliding-window (exact log, packets only) or sliding-window-counter")
	fs.DurationVar(&l.window, "window", time.Second, "window length of the window algorithms (windows align to multiples of it since the Unix epoch)")
	fs.StringVar(&l.key, "key", "5tuple", "what makes a flow: 5tuple, src, dst or src-dst (like hashlimit's --hashlimit-mode)")
	fs.IntVar(&l.srcPrefix4, "src-prefix4", 32, "IPv4 source prefix length a flow is keyed by (24 = one limit per /24)")
	fs.IntVar(&l.dstPrefix4, "dst-prefix4", 32, "IPv4 destination prefix length")
	fs.IntVar(&l.srcPrefix6, "src-prefix6", 128, "IPv6 source prefix length (64 = one limit per /64)")
	fs.IntVar(&l.dstPrefix6, "dst-prefix6", 128, "IPv6 destination prefix length")
	fs.BoolVar(&l.symmetric, "symmetric", false, "count both directions of a conversation as one flow")
	fs.IntVar(&l.maxFlows, "max-flows", flows.DefaultMaxFlows, "flow table cap; when full the least recently used flow is evicted (about 220 bytes per flow)")
	fs.DurationVar(&l.flowTimeout, "flow-timeout", time.Duration(shaper.DefaultFlowTimeout), "forget a flow after this long without packets")
	fs.StringVar(&l.malformed, "malformed", "accept", "verdict for packets that do not decode as IP: accept or drop")
	return l
}

// config turns the flags into an engine configuration, or a one-line error
// naming the bad flag.
// engineConfig is a one-rule policy: the limiter and the verdict for
// malformed packets.
type engineConfig struct {
	shaper.Config
	Malformed shaper.Verdict
}

func newEngine(c engineConfig) (*shaper.Engine, error) {
	return shaper.NewPolicy(shaper.Policy{Rules: []shaper.Rule{{Name: "default", Limit: c.Config}}, Malformed: c.Malformed})
}

func (l *limiterFlags) config() (engineConfig, error) {
	var c engineConfig
	switch {
	case l.pps != 0 && l.bitrate != "":
		return c, errors.New("--pps and --bitrate are exclusive: give one")
	case l.pps == 0 && l.bitrate == "":
		return c, errors.New("no limit given: set --pps N or --bitrate RATE")
	case l.bitrate != "":
		r, err := shaper.ParseBitrate(l.bitrate)
		if err != nil {
			return c, fmt.Errorf("--bitrate: %v", trimPkg(err))
		}
		c.Rate, c.Bytes = r, true
	default:
		if !(l.pps > 0) {
			return c, fmt.Errorf("--pps must be a positive number, not %v", l.pps)
		}
		c.Rate = l.pps
	}
	var err error
	if c.Algorithm, err = shaper.ParseAlgorithm(l.algo); err != nil {
		return c, fmt.Errorf("--algo: %v", trimPkg(err))
	}
	if l.burst < 0 || (l.burst > 0 && l.burst < 1) {
		return c, fmt.Errorf("--burst must be at least 1, not %v", l.burst)
	}
	c.Burst = l.burst
	if l.window <= 0 {
		return c, fmt.Errorf("--window must be positive, not %v", l.window)
	}
	c.Window = int64(l.window)
	if c.Key.Mode, err = flows.ParseMode(l.key); err != nil {
		return c, fmt.Errorf("--key: %v", trimPkg(err))
	}
	for _, p := range []struct {
		name string
		v    int
		max  int
		dst  *int
	}{
		{"--src-prefix4", l.srcPrefix4, 32, &c.Key.SrcPrefix4},
		{"--dst-prefix4", l.dstPrefix4, 32, &c.Key.DstPrefix4},
		{"--src-prefix6", l.srcPrefix6, 128, &c.Key.SrcPrefix6},
		{"--dst-prefix6", l.dstPrefix6, 128, &c.Key.DstPrefix6},
	} {
		if p.v < 1 || p.v > p.max {
			return c, fmt.Errorf("%s must be between 1 and %d, not %d", p.name, p.max, p.v)
		}
		*p.dst = p.v
	}
	c.Key.Symmetric = l.symmetric
	if l.maxFlows < 1 {
		return c, fmt.Errorf("--max-flows must be at least 1, not %d", l.maxFlows)
	}
	c.MaxFlows = l.maxFlows
	if l.flowTimeout <= 0 {
		return c, fmt.Errorf("--flow-timeout must be positive, not %v", l.flowTimeout)
	}
	c.FlowTimeout = int64(l.flowTimeout)
	if c.Malformed, err = shaper.ParseVerdict(l.malformed); err != nil {
		return c, fmt.Errorf("--malformed: %v", trimPkg(err))
	}
	// Let the engine check the combination (e.g. sliding-window with
	// --bitrate, a rate too low for the window).
	if _, err := newEngine(c); err != nil {
		return c, errors.New(trimPkg(err))
	}
	return c, nil
}

// trimPkg drops the "shaper: " / "flows: " prefix that package errors carry,
// for messages that already name the flag.
func trimPkg(err error) string {
	s := err.Error()
	for _, p := range []string{"shaper: ", "flows: "} {
		if len(s) > len(p) && s[:len(p)] == p {
			return s[len(p):]
		}
	}
	return s
}
