package global

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of Config's zero fields.
const (
	DefaultTimeout   = 20 * time.Millisecond
	DefaultPoll      = time.Millisecond
	DefaultSweep     = 100 * time.Millisecond
	DefaultLeaseLife = 4 * time.Second
	DefaultGrace     = 100 * time.Millisecond
	DefaultProbe     = 200 * time.Millisecond
	DefaultInterval  = time.Second
)

// Config says how to reach the store and how the refresher runs. The zero
// value of each field means the default that its comment states; Open never
// writes them back.
type Config struct {
	// Addrs: one host:port (a single server or a Valkey/Redis primary),
	// or with Cluster the seed nodes of a Redis Cluster. Required.
	Addrs   []string
	Cluster bool
	// Username and Password for AUTH (an ACL user, or "" for the
	// default user); "" for no password.
	Username, Password string
	// TLS, if not nil, makes every connection use TLS with these
	// settings (go-redis's TLSConfig). Else TLSFiles, if not nil, does
	// with the files it names, which Open reads.
	TLS      *tls.Config
	TLSFiles *TLSFiles
	// Timeout bounds each request (a pipeline of n asks gets Timeout plus
	// n × max(100 µs, twice the store's recent time per ask)). Default
	// DefaultTimeout.
	Timeout time.Duration
	// KeyPrefix starts every key, as given ("" is no prefix).
	KeyPrefix string
	// HostID names this host in the store; "": random, new at each Open.
	HostID string
	// Clock returns the engines' time (ns since the Unix epoch) on this
	// host: leases expire on it. Default: the wall clock at Open advanced
	// by the monotonic clock, as the live path's queues read it.
	Clock func() int64
	// Logger receives the fallback's log lines (nil: none).
	Logger *slog.Logger

	// Poll is the least time between two turns of the refresher
	// (DefaultPoll): it wakes when a lease runs low or a key is new, at
	// most once a Poll, and when an ask is due; Sweep how often it looks
	// at all the leases, to renew, retire and measure (DefaultSweep); LeaseLife how long a token
	// bucket's lease may be spent without a new ask (DefaultLeaseLife);
	// Grace how long after Timeout failing requests make the rules fall
	// back (DefaultGrace); Probe how often a store that failed is tried
	// again (DefaultProbe).
	Poll, Sweep, LeaseLife, Grace, Probe time.Duration

	// Interval is the refresh interval (DefaultInterval): a host's cap of
	// a key is what its share of the rate makes in an Interval, so that a
	// key above its limit costs about one ask per host and Interval,
	// whatever the slack and the traffic. The hosts together hold at most
	// rate × max(Interval, global-slack × 1 s) of a key: the bound's
	// slack. Less, a tighter bound and more asks.
	Interval time.Duration

	// TokenLeases gives token-bucket rules the token leases of before
	// (the store holds the key's bucket and hands out tokens, a queue of
	// visits for a key above its limit: about max(hosts ÷ Interval,
	// 2 × rate ÷ burst) asks per second) instead of rate leases (rate.go,
	// the default: a share of the rate per interval and a burst bucket,
	// about hosts ÷ Interval asks per second). Fixed-window rules always
	// take token leases of their window.
	TokenLeases bool

	// unbounded: go-redis's own dialer, no reply bounds (bound.go); only
	// the tests of the panic recovery set it.
	unbounded bool
}

// Client is one connection to the store and the refresher that keeps the
// leases of every global rule made by NewRule. It is safe for concurrent
// use.
type Client struct {
	cfg   Config
	st    store
	clock func() int64
	log   *slog.Logger
	host  string

	timeout, poll, sweep, life, grace, probe, interval int64 // ns

	mu    sync.Mutex
	rules []*Rule

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// wake is signalled (without blocking) when a rule has a new key or
	// a lease queued: the refresher's next turn is due.
	wake chan struct{}

	// The refresher's own state.
	batch        []*entry
	lastTurn     int64
	lastSweep    int64
	failingSince int64
	fallbackAt   int64
	lastProbe    int64
	rtt          float64 // ns, EWMA of a pipeline's round trip
	perAsk       float64 // ns, EWMA of a large pipeline's time per ask
	rng          *mrand.Rand
	// Buffers of the asks of one pipeline.
	keys []string
	args []askArgs
	res  []askResult

	fallback atomic.Bool
	commands atomic.Uint64 // requests sent (each ask, SCRIPT LOAD, PING)
	errs     atomic.Uint64 // requests that failed
	lastErr  atomic.Pointer[errText]
	turns    atomic.Uint64 // turns of the refresher (step)
}

type errText struct{ s string }

// ConfigError is a Config or RuleConfig that Open or NewRule refuses:
// Field names the setting (the struct field: "Addrs", "KeyPrefix",
// "Limit"), Msg what is wrong with it. Its text is Msg alone, with no
// package prefix: the caller says where the setting came from.
type ConfigError struct {
	Field, Msg string
}

func (e *ConfigError) Error() string { return e.Msg }

// Open checks cfg and starts the client and its refresher. It does not wait
// for the store: a store that is down at start makes the rules fall back,
// like one that goes down later, and they take leases once it answers. A
// cfg it refuses is a *ConfigError; its errors carry no package prefix.
func Open(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, &ConfigError{Field: "Addrs", Msg: "no store address"}
	}
	if len(cfg.Addrs) > 1 && !cfg.Cluster {
		return nil, &ConfigError{Field: "Addrs", Msg: fmt.Sprintf("%d addresses need Cluster (a single server or primary takes one)", len(cfg.Addrs))}
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return nil, &ConfigError{Field: "KeyPrefix", Msg: "the key prefix must not hold { or }"}
	}
	if cfg.TLS == nil && cfg.TLSFiles != nil {
		var err error
		if cfg.TLS, err = cfg.TLSFiles.Load(); err != nil {
			return nil, err
		}
	}
	to := max(durOr(cfg.Timeout, DefaultTimeout), int64(100*time.Millisecond))
	dial := boundedDialer(cfg.TLS, time.Duration(to))
	if cfg.unbounded {
		dial = nil // the tests of the recovery alone: go-redis's own dialer
	}
	// No retries and no dial retries: a request that fails is the
	// refresher's to retry, and a dead store must fail fast, not after
	// seconds of backoff. RESP2 and no CLIENT SETINFO: no extra commands
	// per connection, any Redis or Valkey version. Every connection
	// through boundedDialer (bound.go): replies bounded.
	open := func() redis.UniversalClient {
		if cfg.Cluster {
			return redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: cfg.Addrs, Username: cfg.Username, Password: cfg.Password, TLSConfig: cfg.TLS, Protocol: 2, DisableIdentity: true,
				Dialer:     dial,
				MaxRetries: -1, DialTimeout: time.Duration(to), DialerRetries: 1,
				ReadTimeout: -1, WriteTimeout: -1, ContextTimeoutEnabled: true, // deadlines from each request's context
				MaxRedirects: 3, PoolSize: 4,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			})
		}
		return redis.NewClient(&redis.Options{
			Addr: cfg.Addrs[0], Username: cfg.Username, Password: cfg.Password, TLSConfig: cfg.TLS, Protocol: 2, DisableIdentity: true,
			Dialer:     dial,
			MaxRetries: -1, DialTimeout: time.Duration(to), DialerRetries: 1,
			ReadTimeout: -1, WriteTimeout: -1, ContextTimeoutEnabled: true, PoolSize: 4,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
	}
	rdb := open()
	c, err := newClient(cfg, &redisStore{rdb: rdb, open: open})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	go c.run()
	return c, nil
}

// newClient makes the client on st, its refresher not started (Open starts
// it; the unit tests call step themselves, on a fake clock).
func newClient(cfg Config, st store) (*Client, error) {
	c := &Client{
		st:       st,
		cfg:      cfg,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		host:     cfg.HostID,
		timeout:  durOr(cfg.Timeout, DefaultTimeout),
		poll:     durOr(cfg.Poll, DefaultPoll),
		sweep:    durOr(cfg.Sweep, DefaultSweep),
		life:     durOr(cfg.LeaseLife, DefaultLeaseLife),
		grace:    durOr(cfg.Grace, DefaultGrace),
		probe:    durOr(cfg.Probe, DefaultProbe),
		interval: durOr(cfg.Interval, DefaultInterval),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		rng:      mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 7)),
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.clock == nil {
		base := time.Now()
		baseNs := base.UnixNano()
		c.clock = func() int64 { return baseNs + int64(time.Since(base)) }
	}
	if c.host == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("host id: %w", err)
		}
		c.host = hex.EncodeToString(b[:])
	}
	c.lastSweep = c.clock()
	return c, nil
}

func durOr(d, def time.Duration) int64 {
	if d <= 0 {
		d = def
	}
	return int64(d)
}

// HostID is the name of this host in the store.
func (c *Client) HostID() string { return c.host }

// Close stops the refresher, retires every rule's leases (their engines
// then limit locally with the rules' overflow limiters) and closes the
// connection.
func (c *Client) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
	c.mu.Lock()
	rules := c.rules
	c.rules = nil
	c.mu.Unlock()
	for _, r := range rules {
		r.retireAll()
	}
	return c.st.close()
}

// Stats is what the client has done.
type Stats struct {
	// Commands counts the requests sent to the store: every ask (one
	// EVALSHA per key), SCRIPT LOAD and PING.
	Commands uint64
	// Errors counts the requests that failed.
	Errors uint64
	// Fallback is true while the store is taken as gone.
	Fallback bool
	// LastError is the last request's error, "" if none failed.
	LastError string
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := Stats{Commands: c.commands.Load(), Errors: c.errs.Load(), Fallback: c.fallback.Load()}
	if e := c.lastErr.Load(); e != nil {
		s.LastError = e.s
	}
	return s
}

func (c *Client) addRule(r *Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules = append(c.rules, r)
}

func (c *Client) removeRule(r *Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.rules {
		if o == r {
			c.rules = append(c.rules[:i:i], c.rules[i+1:]...)
			return
		}
	}
}

func (c *Client) snapshot() []*Rule {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rules
}

// run is the refresher. It takes a turn (step) when woken by a new key or
// a lease that ran low (signal: at most once a Poll), and when its next
// duty is due (nextWake: an ask scheduled, the sweep, a probe, the
// fallback's deadline); an idle refresher wakes once a Sweep.
func (c *Client) run() {
	defer close(c.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.wake:
			// Woken on demand: no sooner than a Poll after the
			// last turn (engines queue leases in bursts).
			if d := c.lastTurn + c.poll - c.clock(); d > 0 {
				t.Reset(time.Duration(d))
				select {
				case <-c.stop:
					return
				case <-t.C:
				}
			}
		}
		now := c.clock()
		c.step(now)
		c.lastTurn = now
		t.Reset(time.Duration(max(c.nextWake(now)-c.clock(), 0)))
	}
}

// signal wakes the refresher for a turn (without blocking).
func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// nextWake is when the refresher must take its next turn if nothing wakes
// it: the next sweep, the earliest ask scheduled, and while the store
// fails, when the rules fall back or the next probe.
func (c *Client) nextWake(now int64) int64 {
	next := c.lastSweep + c.sweep
	for _, r := range c.snapshot() {
		if r.due.Len() > 0 {
			next = min(next, r.due.Top().at)
		}
	}
	if c.fallback.Load() {
		next = min(next, c.lastProbe+c.probe)
	} else if c.failingSince != 0 {
		next = min(next, c.failingSince+c.timeout+c.grace)
	}
	return max(next, now+c.poll/4)
}

// step is one turn of the refresher at now.
func (c *Client) step(now int64) {
	c.turns.Add(1)
	rules := c.snapshot()
	sweep := now-c.lastSweep >= c.sweep
	if sweep {
		c.lastSweep = now
	}
	fallback := c.fallback.Load()
	probe := fallback && now-c.lastProbe >= c.probe
	c.batch = c.batch[:0]
	for _, r := range rules {
		c.batch = r.collect(now, sweep, fallback, probe, c.batch)
	}
	if fallback {
		if probe {
			c.lastProbe = now
			c.tryReturn(rules)
		}
		return
	}
	if len(c.batch) > 0 {
		ok, failed := c.send(c.batch)
		switch {
		case ok > 0:
			c.failingSince = 0
		case failed > 0 && c.failingSince == 0:
			c.failingSince = now
		}
	}
	if c.failingSince != 0 && c.clock()-c.failingSince >= c.timeout+c.grace {
		c.enterFallback(rules)
	}
}

// askChunk is how many asks go in one pipeline, and askTime the least each
// adds to its deadline (ns); a store that takes longer per ask (loaded, or
// far) gets twice its measured time per ask, so that a large batch is not
// timed out while the store works through it.
const (
	askChunk = 512
	askTime  = 100_000
)

// send asks the store for each entry of batch, in pipelines, and applies
// the replies. It returns how many asks were answered and how many failed.
func (c *Client) send(batch []*entry) (ok, failed int) {
	var again []*entry
	for i := 0; i < len(batch); i += askChunk {
		chunk := batch[i:min(i+askChunk, len(batch))]
		o, f, noScript := c.pipeline(chunk)
		ok += o
		failed += f
		again = append(again, noScript...)
	}
	if len(again) > 0 {
		// The store lost its scripts (a restart, a failover): load
		// and ask once more.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.timeout)*5)
		err := c.st.loadScript(ctx)
		cancel()
		c.commands.Add(1)
		if err != nil {
			c.errs.Add(1)
			c.lastErr.Store(&errText{err.Error()})
			for _, e := range again {
				e.r.failed(e, c.clock(), c.timeout)
			}
			return ok, failed + len(again)
		}
		for i := 0; i < len(again); i += askChunk {
			o, f, ns := c.pipeline(again[i:min(i+askChunk, len(again))])
			ok += o
			failed += f + len(ns)
			for _, e := range ns {
				e.r.failed(e, c.clock(), c.timeout)
			}
		}
	}
	return ok, failed
}

// pipeline sends one chunk of asks and applies the replies; it returns the
// entries whose script was missing apart.
func (c *Client) pipeline(chunk []*entry) (ok, failed int, noScript []*entry) {
	per := max(askTime, 2*int64(c.perAsk))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.timeout+int64(len(chunk))*per))
	defer cancel()
	c.keys, c.args = c.keys[:0], c.args[:0]
	for _, e := range chunk {
		c.keys = append(c.keys, e.key)
		c.args = append(c.args, e.r.args(e))
	}
	if cap(c.res) < len(chunk) {
		c.res = make([]askResult, len(chunk))
	}
	c.res = c.res[:len(chunk)]
	clear(c.res)
	sent := c.clock()
	for _, e := range chunk {
		e.sentAt = sent
	}
	c.st.ask(ctx, c.keys, c.args, c.res)
	now := c.clock()
	c.commands.Add(uint64(len(chunk)))
	if rtt := float64(now - sent); c.rtt == 0 {
		c.rtt = rtt
	} else {
		c.rtt += (rtt - c.rtt) / 8
	}
	switch {
	case len(chunk) >= 32 && ctx.Err() == nil:
		if p := float64(now-sent) / float64(len(chunk)); c.perAsk == 0 {
			c.perAsk = p
		} else {
			c.perAsk += (p - c.perAsk) / 4
		}
	case len(chunk) >= 32:
		// Timed out: a store this busy gets twice the time next (up to
		// 2 ms an ask, past which it is as good as gone).
		c.perAsk = min(max(2*c.perAsk, askTime), 2e6)
	}
	for i, res := range c.res {
		e, err := chunk[i], res.err
		switch {
		case err == nil:
			e.r.apply(e, res.rep, now)
			ok++
		case res.noScript:
			noScript = append(noScript, e)
		default:
			c.errs.Add(1)
			c.lastErr.Store(&errText{err.Error()})
			e.r.errs.Add(1)
			e.r.failed(e, now, c.timeout)
			failed++
		}
	}
	return ok, failed, noScript
}

// lead is how long before a lease runs out its refresher should ask: a
// poll, and a few round trips.
func (c *Client) lead() int64 {
	return max(3*c.poll, 2*c.poll+int64(4*c.rtt))
}

// jitter shortens d by up to 10 %.
func (c *Client) jitter(d int64) int64 {
	return d - int64(float64(d)*0.1*c.rng.Float64())
}

// enterFallback makes every rule limit locally (see Rule.fallbackLimiter)
// and logs it once.
func (c *Client) enterFallback(rules []*Rule) {
	now := c.clock()
	c.fallback.Store(true)
	c.fallbackAt, c.lastProbe = now, now
	for _, r := range rules {
		r.enterFallback()
	}
	var parts []string
	for _, r := range rules {
		parts = append(parts, fmt.Sprintf("%s=%.4g/s (share %.2f of %d hosts)", r.name, r.fbRate, r.fbShare, r.fbHosts))
	}
	lastErr := ""
	if e := c.lastErr.Load(); e != nil {
		lastErr = e.s
	}
	c.log.Warn("global: the store does not answer: global rules fall back to local limits until it does",
		"failing_for", time.Duration(now-c.failingSince).Round(time.Millisecond).String(), "error", lastErr,
		"timeout", time.Duration(c.timeout).String(), "local_limits", strings.Join(parts, ","))
}

// tryReturn asks the store for the leases of every key active during the
// fallback, and when all are answered puts the rules back on leases.
func (c *Client) tryReturn(rules []*Rule) {
	var ok, failed int
	if len(c.batch) > 0 {
		ok, failed = c.send(c.batch)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.timeout))
		err := c.st.ping(ctx)
		cancel()
		c.commands.Add(1)
		if err != nil {
			c.errs.Add(1)
			c.lastErr.Store(&errText{err.Error()})
			failed = 1
		} else {
			ok = 1
		}
	}
	if failed > 0 || ok == 0 {
		return
	}
	c.fallback.Store(false)
	c.failingSince = 0
	for _, r := range rules {
		r.leaveFallback()
	}
	c.log.Info("global: the store answers again: global rules are back on leases",
		"fallback_for", time.Duration(c.clock()-c.fallbackAt).Round(time.Millisecond).String())
}
