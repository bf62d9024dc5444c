package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
	"github.com/spf13/pflag"
)

// The limiter flags, which the live shaper and replay share, are what a
// flow is and how it is limited: policy.DefineFlags defines them from the
// rule file's schema, with its field names. Alone they make a one-rule
// policy (rule "default", matching every packet); with --policy FILE they
// are refused.

// limiterFlagNames are the flags policy.DefineFlags defines.
func limiterFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	policy.DefineFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
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
	fs        *pflag.FlagSet
	limiter   *policy.Flags
	file      string
	malformed string
}

// addPolicyFlags adds the policy flags (group "policy") and the limiter
// flags (group "limiter", declared by policy.DefineFlags) to fs.
func addPolicyFlags(fs *pflag.FlagSet) *policyFlags {
	limiter := flag.NewFlagSet("", flag.ContinueOnError)
	p := &policyFlags{fs: fs, limiter: policy.DefineFlags(limiter)}
	pol := pflag.NewFlagSet("", pflag.ContinueOnError)
	pol.StringVar(&p.file, "policy", "", "read the rules from the TOML rule `FILE` (see docs/configuration.md) instead of the limiter flags; live: SIGHUP re-reads it")
	// --malformed: the verdict of the packets counted malformed.
	pol.StringVar(&p.malformed, countname.Malformed, "accept", "verdict for packets whose IP header is invalid (the kernel drops those anyway): accept or drop")
	clihelp.AddGroup(fs, clihelp.GroupPolicy, pol)
	lim := pflag.NewFlagSet("", pflag.ContinueOnError)
	lim.AddGoFlagSet(limiter)
	clihelp.AddGroup(fs, clihelp.GroupLimiter, lim)
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
	p.fs.Visit(func(f *pflag.Flag) {
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
	s.flags = p.limiter.File()
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
