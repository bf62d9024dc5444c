package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/global"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// globals holds the store connection of the global rules and each rule's
// leases (global.Rule), across reloads: a global rule that a reload keeps
// keeps its leases, as a local rule keeps its flows.
type globals struct {
	log *slog.Logger

	mu     sync.Mutex
	client *global.Client
	redis  *policy.Redis // what client was opened with
	rules  map[ruleIdent]*global.Rule
	byName map[string]*global.Rule // the current policy's, for stats
}

// ruleIdent is what makes two global rules the same one across a reload
// (as shaper.Engine.Reload compares them).
type ruleIdent struct {
	name, match string
	limit       shaper.Config
}

// newGlobals holds the global rules of the daemon's one engine: a rule's
// leases are for as many keys as its flow table holds.
func newGlobals(log *slog.Logger) *globals {
	return &globals{log: log, rules: map[ruleIdent]*global.Rule{}, byName: map[string]*global.Rule{}}
}

// prepare opens the store connection that comp needs (a new one when its
// [redis] table changed) and returns p, comp's engine policy, with each
// global rule's and total's leases attached, and what to close once no engine uses the
// previous policy. It does not wait for the store: one that is down makes
// the rules fall back. Errors are in the configuration (a password file
// that cannot be read), for a one-line message.
func (g *globals) prepare(p shaper.Policy, comp *policy.Compiled) (shaper.Policy, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rd := comp.Redis()
	var oldClient *global.Client
	client := g.client
	if len(comp.GlobalRules()) == 0 && len(comp.GlobalTotals()) == 0 {
		rd = nil
	}
	if !reflect.DeepEqual(rd, g.redis) {
		oldClient, client = g.client, nil
		if rd != nil {
			var err error
			if client, err = openClient(rd, g.log); err != nil {
				return p, nil, err
			}
		}
	}
	at := &attacher{g: g, client: client, rules: map[ruleIdent]*global.Rule{}, byName: map[string]*global.Rule{}}
	ap, err := at.attachAll(p)
	if err != nil {
		for _, gr := range at.made {
			gr.Close()
		}
		if client != g.client {
			client.Close()
		}
		return p, nil, err
	}
	rules, byName := at.rules, at.byName
	// What the previous policy used and this one does not.
	var drop []*global.Rule
	for id, gr := range g.rules {
		if rules[id] != gr {
			drop = append(drop, gr)
		}
	}
	g.client, g.redis, g.rules, g.byName = client, rd, rules, byName
	p = ap
	done := func() {
		for _, gr := range drop {
			gr.Close()
		}
		if oldClient != nil {
			oldClient.Close()
		}
	}
	return p, done, nil
}

// attacher gives a policy's global rules and totals their leases: those
// of g's previous policy for a limit it keeps on the same client, else new
// ones on client (made).
type attacher struct {
	g      *globals
	client *global.Client
	rules  map[ruleIdent]*global.Rule
	byName map[string]*global.Rule
	made   []*global.Rule
}

// attach returns the leases of the global limit id.
func (a *attacher) attach(id ruleIdent, maxKeys int) (*global.Rule, error) {
	gr := a.g.rules[id]
	if gr == nil || a.client != a.g.client {
		var err error
		if gr, err = a.client.NewRule(global.RuleConfig{Name: id.name, Limit: id.limit, MaxKeys: maxKeys}); err != nil {
			return nil, err
		}
		a.made = append(a.made, gr)
	}
	a.rules[id] = gr
	a.byName[id.name] = gr
	return gr, nil
}

// attachAll returns p with the leases of its global rules and totals
// attached (p's slices copied, not changed).
func (a *attacher) attachAll(p shaper.Policy) (shaper.Policy, error) {
	p.Rules = append([]shaper.Rule(nil), p.Rules...)
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Action != shaper.ActionLimit || !r.Limit.Global {
			continue
		}
		maxFlows := r.Limit.MaxFlows
		if maxFlows <= 0 {
			maxFlows = flows.DefaultMaxFlows
		}
		gr, err := a.attach(ruleIdent{r.Name, r.Match, r.Limit}, maxFlows)
		if err != nil {
			return p, fmt.Errorf("rule %s: %w", r.Name, err)
		}
		r.Global = gr
	}
	// A global total is one key (shaper.TotalKey) of a global limit named
	// after it (TotalStoreName: no rule's name has a "/").
	p.Totals = append([]shaper.Total(nil), p.Totals...)
	for i := range p.Totals {
		t := &p.Totals[i]
		if !t.Limit.Global {
			continue
		}
		gr, err := a.attach(ruleIdent{name: TotalStoreName(t.Name), limit: t.Limit.Config()}, 1)
		if err != nil {
			return p, fmt.Errorf("total %s: %w", t.Name, err)
		}
		t.Global = gr
	}
	return p, nil
}

// TotalStoreName is the name a global total's leases have in the store
// and in the global rules' stats and metrics: "total/" and the engine's
// name of the total.
func TotalStoreName(total string) string { return "total/" + total }

// openClient connects to the store rd names (not waiting for it).
func openClient(rd *policy.Redis, log *slog.Logger) (*global.Client, error) {
	var password string
	if rd.PasswordFile != "" {
		b, err := os.ReadFile(rd.PasswordFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("redis.password-file: cannot read %s: %w", rd.PasswordFile, err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	var tlsFiles *global.TLSFiles
	if rd.TLS != nil && *rd.TLS {
		tlsFiles = &global.TLSFiles{CAFile: rd.CAFile, CertFile: rd.CertFile, KeyFile: rd.KeyFile, ServerName: rd.ServerName}
	}
	// go-redis's own lines (a store gone: "failed to dial") go through
	// the daemon's logger, not as plain text on stderr.
	global.SetRedisLogger(log)
	c, err := global.Open(global.Config{
		Addrs: rd.Addrs, Cluster: *rd.Cluster, Username: rd.Username, Password: password, TLSFiles: tlsFiles,
		Timeout: time.Duration(rd.Timeout), KeyPrefix: *rd.KeyPrefix, Logger: log,
		Interval: time.Duration(rd.RefreshInterval), TokenLeases: rd.Leases == "token",
	})
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return c, nil
}

// close closes the store connection (the engines have stopped).
func (g *globals) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.client != nil {
		g.client.Close()
	}
	g.client = nil
}

// stats returns the current policy's global rules' state by name, and the
// client's.
func (g *globals) stats() (map[string]global.RuleStats, global.Stats, bool) {
	if g == nil {
		return nil, global.Stats{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.client == nil {
		return nil, global.Stats{}, false
	}
	m := make(map[string]global.RuleStats, len(g.byName))
	for name, r := range g.byName {
		m[name] = r.Stats()
	}
	return m, g.client.Stats(), true
}

// describe says where the store is, for the start line.
func (g *globals) describe() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.client == nil {
		return nil
	}
	kind := "server"
	if *g.redis.Cluster {
		kind = "cluster"
	}
	var names []string
	for n := range g.byName {
		names = append(names, n)
	}
	return []any{"global_rules", strings.Join(sortedStrings(names), ","), "redis", kind + " " + strings.Join(g.redis.Addrs, ","),
		"redis_timeout", time.Duration(g.redis.Timeout).String(), "host_id", g.client.HostID()}
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
