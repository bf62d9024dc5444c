package policy

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// Defaults of the rule settings, as the limiter flags have them.
const (
	DefaultAction   = "limit"
	DefaultMode     = "enforce"
	DefaultOnExceed = "drop"
	DefaultKey      = "5tuple"
	DefaultNoOwner  = "accept-replies"
	DefaultAlgo     = "token-bucket"
	// ShapeAlgo is the name of the token bucket that shapes: algo =
	// "leaky-bucket" is algo = "token-bucket" with shape = true.
	ShapeAlgo    = "leaky-bucket"
	DefaultScope = "local"
	// DefaultGlobalSlack is a global rule's global-slack.
	DefaultGlobalSlack = shaper.DefaultGlobalSlack
	// DefaultRedisTimeout bounds each request to the store.
	DefaultRedisTimeout = Duration(20 * time.Millisecond)
	// DefaultRefreshInterval is how often a host asks for a key above
	// its limit (internal/global's DefaultInterval).
	DefaultRefreshInterval = Duration(time.Second)
	// DefaultLeases is how global token-bucket rules lease their keys
	// (the other: "token").
	DefaultLeases = "rate"
	// MaxRedisTimeout is the largest timeout.
	MaxRedisTimeout = Duration(10 * time.Second)
	// DefaultKeyPrefix starts every key in the store.
	DefaultKeyPrefix = "packetshaper:"
)

// DefaultMaxDelay is a shaping rule's max-delay when it gives none.
const DefaultMaxDelay = Duration(shaper.DefaultMaxDelay)

// parseAlgo parses a rule's algo: a shaper.Algorithm's name, or ShapeAlgo
// (the token bucket, shaping).
func parseAlgo(s string) (a shaper.Algorithm, shape bool, err error) {
	if s == ShapeAlgo {
		return shaper.TokenBucket, true, nil
	}
	a, err = shaper.ParseAlgorithm(s)
	if err != nil {
		return 0, false, fmt.Errorf("unknown algorithm %q (want token-bucket, leaky-bucket, fixed-window, sliding-window or sliding-window-counter)", s)
	}
	return a, false, nil
}

// ruleSpec is a checked rule resolved for Compile.
type ruleSpec struct {
	rule  shaper.Rule // Match not yet set
	match matchSpec
	// warn is a warning for Compiled.Warnings, or "".
	warn string
	// unitWarn is the warning for a bitrate in bytes per second, or "".
	unitWarn string
}

type portRange struct{ lo, hi uint16 }

// matchSpec is a checked match table. nil lists and zero values are not
// given.
type matchSpec struct {
	family   uint8 // 0, 4 or 6
	src, dst []netip.Prefix
	proto    []uint8
	sport    []portRange
	dport    []portRange
	iif, oif []string
	hasMark  bool
	mark     uint32
	markMask uint32
	queue    []uint16
	uid, gid []idRange
	// tcp-flags, icmp-type, length, dscp (hasDSCP: given) and ct-state
	// (0: not given), l4match.go.
	tcpFlags []flagPair
	icmp     *icmpSet
	length   []idRange
	hasDSCP  bool
	dscp     uint64
	ct       shaper.CtState
}

// idRange is a range of uids or gids.
type idRange struct{ lo, hi uint32 }

// Validate checks every rule as Parse does, including the combination
// checks of the engine (shaper.Config.Check). A File built in code (the
// command line's flags as a one-rule File) gets errors without a place in a
// file, whose Field names the setting ("burst") and whose Msg says what is
// wrong with it ("must be at least 1, not 0.5"). Of several problems it
// reports the first in the file.
func (f *File) Validate() error {
	_, _, err := f.check()
	return err
}

func (f *File) check() ([]ruleSpec, []shaper.Total, error) {
	if len(f.Rules) == 0 {
		return nil, nil, &Error{File: f.Name, Msg: "no rules: a rule file needs at least one [[rule]]"}
	}
	if len(f.Rules) > shaper.MaxRules {
		return nil, nil, f.errAt(shaper.MaxRules, "", -1, "too many rules: %d, at most %d", len(f.Rules), shaper.MaxRules)
	}
	var errs errList
	// Config.Check builds a rule's whole state (a flow table's first
	// megabyte): check each distinct Config once.
	checked := map[shaper.Config]error{}
	specs := make([]ruleSpec, len(f.Rules))
	names := make(map[string]int, len(f.Rules))
	items := 0
	for i := range f.Rules {
		r := &f.Rules[i]
		if j, ok := names[r.Name]; ok && r.Name != "" {
			msg := fmt.Sprintf("%q is already the name of rule #%d", r.Name, j+1)
			if f.pos != nil {
				msg += fmt.Sprintf(" (line %d)", f.pos.at(j, "name", -1).line)
			}
			errs.add(f.errAt(i, "name", -1, "%s", msg))
		}
		names[r.Name] = i
		if m := r.Match; m != nil {
			items += len(m.Src) + len(m.Dst) + len(m.Proto) + len(m.Sport) + len(m.Dport) + len(m.Iif) + len(m.Oif) + len(m.Queue) + len(m.UID) + len(m.GID) +
				len(m.TCPFlags) + len(m.ICMPType) + len(m.Length) + len(m.DSCP) + len(m.CtState)
			if items > MaxMatchItems {
				errs.add(f.errAt(i, "match", -1, "too many match items: more than %d in the file", MaxMatchItems))
				break
			}
		}
		specs[i] = f.checkRule(i, &errs, checked)
	}
	f.checkRedis(&errs)
	totals := f.checkTotals(specs, &errs)
	if err := errs.first(); err != nil {
		return nil, nil, err
	}
	// The classifier keeps up to a rule set (a bit per rule, in words)
	// per item: bound what compiling may take.
	if words := (len(f.Rules) + 63) / 64; items*(words+1)*8 > MaxMatchBytes {
		return nil, nil, &Error{File: f.Name, Msg: fmt.Sprintf("the match tables would take up to %d MiB compiled (%d items × %d rules), over %d MiB: use fewer rules or fewer addresses per rule",
			items*(words+1)*8>>20, items, len(f.Rules), MaxMatchBytes>>20)}
	}
	return specs, totals, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// given lists the limit rules' settings that r has, by field name.
func (r *Rule) given() []string {
	var g []string
	for i := range schema {
		if f := &schema[i]; f.limit && f.given(f.inRule(r)) {
			g = append(g, f.name)
		}
	}
	return g
}

func (f *File) checkRule(i int, errs *errList, checked map[shaper.Config]error) ruleSpec {
	r := &f.Rules[i]
	bad := func(field, format string, args ...any) *Error {
		e := f.errAt(i, field, -1, format, args...)
		errs.add(e)
		return e
	}
	switch {
	case r.Name == "":
		bad("name", "missing: every rule needs a unique name")
	case !validName(r.Name):
		bad("name", "%q is not a valid name: use letters, digits, \"_\", \".\" and \"-\"", r.Name)
	}
	s := ruleSpec{rule: shaper.Rule{Name: r.Name}}
	known := true
	switch r.Action {
	case "", "limit":
		s.rule.Action = shaper.ActionLimit
	case "accept":
		s.rule.Action = shaper.ActionAccept
	case "drop":
		s.rule.Action = shaper.ActionDrop
	default:
		bad("action", "unknown action %q (want limit, accept or drop)", r.Action)
		known = false
	}
	s.match = f.checkMatch(i, r.Match, errs)
	switch {
	case !known:
	case s.rule.Action != shaper.ActionLimit:
		for _, g := range r.given() {
			bad(g, "not allowed on %s rule: only limit rules take it", article(r.Action))
		}
	default:
		f.checkLimit(i, &s, errs, checked)
	}
	return s
}

func article(action string) string {
	if action == "accept" {
		return "an accept"
	}
	return "a " + action
}

func (f *File) checkLimit(i int, s *ruleSpec, errs *errList, checked map[shaper.Config]error) {
	r := &f.Rules[i]
	n0 := len(*errs)
	bad := func(field, format string, args ...any) *Error {
		e := f.errAt(i, field, -1, format, args...)
		errs.add(e)
		return e
	}
	switch {
	case r.PPS != nil && r.Bitrate != "":
		field := "bitrate"
		if f.pos != nil && f.pos.at(i, "bitrate", -1).before(f.pos.at(i, "pps", -1)) {
			field = "pps"
		}
		bad(field, "pps and bitrate are exclusive: give one")
	case r.PPS == nil && r.Bitrate == "":
		field := ""
		if r.Action != "" {
			field = "action"
		}
		bad(field, "no limit given: set pps or bitrate (or action = \"accept\" or \"drop\")").Problem = ProblemNoLimit
	case r.PPS != nil:
		switch v := *r.PPS; {
		case v < 0:
			bad("pps", "is negative (%v): a rate is above zero (to drop every packet, a rule with action = \"drop\")", v)
		case v == 0:
			bad("pps", "is zero: a rate is above zero (to drop every packet, a rule with action = \"drop\")")
		case !(v > 0) || math.IsInf(v, 0):
			bad("pps", "must be a positive number, not %v", v)
		}
	default:
		if _, err := shaper.ParseBitrate(r.Bitrate); err != nil {
			bad("bitrate", "%w", err)
		} else {
			s.unitWarn = byteUnitWarning(r.Name, r.Bitrate)
		}
	}
	if r.Burst != nil {
		switch v := *r.Burst; {
		case !(v >= 1):
			bad("burst", "must be at least 1, not %v", v)
		case v > shaper.MaxBurst:
			bad("burst", "must be at most %v, not %v", float64(shaper.MaxBurst), v)
		}
	}
	algo, algoShapes := shaper.TokenBucket, false
	if r.Algo != "" {
		var err error
		if algo, algoShapes, err = parseAlgo(r.Algo); err != nil {
			bad("algo", "%w", err)
		}
	}
	f.checkShape(i, algo, algoShapes, errs)
	if r.Window < 0 {
		bad("window", "must be positive, not %v", r.Window)
	}
	if r.Key != "" {
		if _, err := flows.ParseMode(r.Key); err != nil {
			bad("key", "%w", err)
		}
	}
	if r.NoOwner != "" {
		m, err := flows.ParseMode(cmpOr(r.Key, DefaultKey))
		_, perr := flows.ParseNoOwner(r.NoOwner)
		switch {
		case perr != nil:
			bad("no-owner", "%w", perr)
		case err == nil && m.By() != flows.ByUID && m.By() != flows.ByGID:
			bad("no-owner", "needs a uid or gid key (key = \"uid\", \"gid\", or one of them joined to src, dst or src-dst), not key = %q", cmpOr(r.Key, DefaultKey))
		}
	}
	if r.KeyMarkMask != "" {
		m, err := flows.ParseMode(r.Key)
		switch _, perr := parseMarkMask(r.KeyMarkMask); {
		case perr != nil:
			bad("key-mark-mask", "%w", perr)
		case err == nil && m.By() != flows.ByMark:
			bad("key-mark-mask", "needs a mark key (key = \"mark\", or mark joined to src, dst or src-dst), not key = %q", cmpOr(r.Key, DefaultKey))
		}
	}
	for i := range schema {
		// What a kind checks of a value alone (the prefix lengths).
		if fd := &schema[i]; fd.table == tRule && fd.limit {
			if p, c := fd.inRule(r), fd.kind.codec(); c.check != nil && c.given(p) {
				if err := c.check(p); err != nil {
					bad(fd.name, "%w", err)
				}
			}
		}
	}
	if r.MaxFlows != nil {
		switch v := *r.MaxFlows; {
		case v < 1:
			bad("max-flows", "must be at least 1, not %d", v)
		case v > flows.MaxMaxFlows:
			bad("max-flows", "must be at most %d, not %d", flows.MaxMaxFlows, v)
		}
	}
	if r.FlowTimeout < 0 {
		bad("flow-timeout", "must be positive, not %v", r.FlowTimeout)
	}
	switch r.Mode {
	case "", "enforce":
	case "shadow":
		s.rule.Shadow = true
	default:
		bad("mode", "unknown mode %q (want enforce or shadow)", r.Mode)
	}
	switch r.OnExceed {
	case "", "drop":
		if r.SetMark != "" {
			bad("set-mark", "needs on-exceed = \"mark\"")
		}
	case "mark":
		if r.SetMark == "" {
			bad("on-exceed", "\"mark\" needs set-mark (such as set-mark = \"0x1/0x1\")")
		}
		s.rule.MarkExceeded = true
	default:
		bad("on-exceed", "unknown value %q (want drop or mark)", r.OnExceed)
	}
	if r.SetMark != "" {
		v, m, err := parseMark(r.SetMark)
		if err != nil {
			bad("set-mark", "%w", err)
		}
		s.rule.Mark, s.rule.MarkMask = v, m
	}
	switch r.Scope {
	case "", "local":
		if r.GlobalSlack != nil {
			bad("global-slack", "only for global rules (scope = \"global\")").needs("scope")
		}
	case "global":
		if r.Algo != "" && r.Algo != "token-bucket" && r.Algo != "fixed-window" {
			bad("algo", "a global rule is token-bucket or fixed-window, not %q", r.Algo)
		}
		if r.Shape != nil && *r.Shape {
			bad("shape", "a global rule does not shape: its budget comes from the store in leases, not as a departure time per packet (shape locally, or police globally)")
		}
		if r.GlobalSlack != nil {
			if v := *r.GlobalSlack; !(v > 0 && v <= 1) {
				bad("global-slack", "must be more than 0 and at most 1 (a fraction of the rate × 1 s), not %v", v)
			}
		}
		if f.Redis == nil {
			bad("scope", "\"global\" needs the [redis] table: the addrs of the store the hosts share").needs("redis.addrs")
		}
	default:
		bad("scope", "unknown scope %q (want local or global)", r.Scope)
	}
	if len(*errs) > n0 {
		return
	}
	d := r.WithDefaults()
	c := d.config()
	err, ok := checked[c]
	if !ok {
		err = c.Check()
		checked[c] = err
	}
	if err != nil {
		rate := "pps"
		if c.Bytes {
			rate = "bitrate"
		}
		var ce *shaper.ConfigError
		if errors.As(err, &ce) {
			bad(fieldFor(ce.Settings, r.given(), rate), "%w", err)
		} else {
			bad(rate, "%w", err)
		}
		return
	}
	s.warn = f.checkFlowTimeout(i, &d, func(format string, args ...any) *Error { return bad("flow-timeout", format, args...) })
	s.rule.Limit = c
}

// checkShape checks shape and max-delay against the rule's algorithm (algo,
// and whether its name shapes), mode and on-exceed.
func (f *File) checkShape(i int, algo shaper.Algorithm, algoShapes bool, errs *errList) {
	r := &f.Rules[i]
	bad := func(field, format string, args ...any) *Error {
		e := f.errAt(i, field, -1, format, args...)
		errs.add(e)
		return e
	}
	shapes := algoShapes || r.Shape != nil && *r.Shape
	// The field that asks for shaping, to blame for what does not go
	// with it.
	field := "shape"
	if r.Shape == nil {
		field = "algo"
	}
	switch {
	case r.MaxDelay < 0:
		bad("max-delay", "must be positive, not %v", r.MaxDelay)
	case algoShapes && r.Shape != nil && !*r.Shape:
		bad("shape", "algo %q always shapes: leave shape out or set it to true (algo \"token-bucket\" polices)", ShapeAlgo)
	case shapes && algo != shaper.TokenBucket:
		bad("shape", "only the token bucket shapes (algo \"token-bucket\" or %q), not %s", ShapeAlgo, algo)
	case shapes && r.Mode == "shadow":
		bad(field, "a shaping rule cannot be a shadow rule (mode = \"shadow\"): it holds packets, which a dry run must not")
	case shapes && r.OnExceed == "mark":
		bad(field, "a shaping rule delays what exceeds the rate and drops only what overflows its queue: on-exceed = \"mark\" does not apply")
	case !shapes && r.MaxDelay != 0:
		bad("max-delay", "needs shape = true (or algo = %q)", ShapeAlgo).needs("shape")
	case r.MaxDelay > Duration(shaper.MaxMaxDelay):
		bad("max-delay", "must be at most %v, not %v", time.Duration(shaper.MaxMaxDelay), r.MaxDelay)
	}
}

// config is the engine's Config of a rule that is checked and has its
// defaults filled in.
func (d *Rule) config() shaper.Config {
	var c shaper.Config
	if d.PPS != nil {
		c.Rate = *d.PPS
	} else {
		c.Rate, _ = shaper.ParseBitrate(d.Bitrate)
		c.Bytes = true
	}
	c.Algorithm, _, _ = parseAlgo(d.Algo)
	c.Shape = *d.Shape
	if c.Shape {
		c.MaxDelay = int64(d.MaxDelay)
	}
	c.Burst = *d.Burst
	c.Window = int64(d.Window)
	c.Key.Mode, _ = flows.ParseMode(d.Key)
	c.Key.SrcPrefix4, c.Key.DstPrefix4 = *d.SrcPrefix4, *d.DstPrefix4
	c.Key.SrcPrefix6, c.Key.DstPrefix6 = *d.SrcPrefix6, *d.DstPrefix6
	c.Key.Symmetric = *d.Symmetric
	if d.KeyMarkMask != "" {
		c.Key.MarkMask, _ = parseMarkMask(d.KeyMarkMask)
	}
	if by := c.Key.Mode.By(); by == flows.ByUID || by == flows.ByGID {
		c.Key.NoOwner, _ = flows.ParseNoOwner(cmpOr(d.NoOwner, DefaultNoOwner))
	}
	c.MaxFlows = *d.MaxFlows
	c.FlowTimeout = int64(d.FlowTimeout)
	if d.Scope == "global" {
		c.Global = true
		c.GlobalSlack = *d.GlobalSlack
	}
	return c
}

// checkRedis checks the [redis] table.
func (f *File) checkRedis(errs *errList) {
	rd := f.Redis
	if rd == nil {
		return
	}
	bad := func(field string, j int, format string, args ...any) *Error {
		e := f.redisErr(field, j, format, args...)
		errs.add(e)
		return e
	}
	switch {
	case rd.Addrs == nil:
		bad("redis.addrs", -1, "missing: give the store's host:port (several with cluster = true)").Problem = ProblemMissing
	case len(rd.Addrs) == 0:
		bad("redis.addrs", -1, "empty list: give the store's host:port (several with cluster = true)")
	case len(rd.Addrs) > 1 && (rd.Cluster == nil || !*rd.Cluster):
		bad("redis.addrs", -1, "%d addresses need cluster = true (Redis Cluster); a single server or a primary takes one", len(rd.Addrs))
	}
	seen := map[string]bool{}
	for j, a := range rd.Addrs {
		if err := checkHostPort(a); err != nil {
			bad("redis.addrs", j, "%w", err)
		} else if seen[a] {
			bad("redis.addrs", j, "%q given twice", a)
		}
		seen[a] = true
	}
	if rd.Timeout > MaxRedisTimeout {
		bad("redis.timeout", -1, "must be at most %v, not %v", MaxRedisTimeout, rd.Timeout)
	}
	if iv := rd.RefreshInterval; iv != 0 && (iv < Duration(10*time.Millisecond) || iv > Duration(time.Minute)) {
		bad("redis.refresh-interval", -1, "must be from 10ms to 1m, not %v", iv)
	}
	if l := rd.Leases; l != "" && l != "rate" && l != "token" {
		bad("redis.leases", -1, "must be rate or token, not %q", l)
	}
	if p := rd.KeyPrefix; p != nil && strings.ContainsAny(*p, "{}") {
		bad("redis.key-prefix", -1, "must not hold \"{\" or \"}\": each key's hash tag is in braces")
	}
	rd.checkTLS(bad)
}

// checkHostPort accepts host:port with a port 1-65535 and a host name or
// address.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	n, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, " /") {
		return fmt.Errorf("bad address %q (want host:port, such as \"10.0.0.5:6379\" or \"[fd00::5]:6379\")", a)
	}
	return nil
}

// WithDefaults returns rd with every setting it leaves out filled in with
// its schema default (tls and its files stay unset when not given: off).
// nil stays nil.
func (rd *Redis) WithDefaults() *Redis {
	if rd == nil {
		return nil
	}
	d := *rd
	for i := range schema {
		if f := &schema[i]; f.table == tRedis {
			f.fill(f.inRedis(&d), nil)
		}
	}
	return &d
}

// WithDefaults returns r with every setting it leaves out filled in with
// its default from the schema, as Compile uses it and Format writes it: the
// action, and for a limit rule its limit settings (each field's def,
// defIf and defFrom say which and when: burst from the rate, max-delay
// for a shaping rule, no-owner for a uid or gid key, global-slack for a
// global rule). A flow-timeout left out is then raised to what the
// limiter remembers of an idle flow if that is longer (see
// shaper.LimiterConfig.Memory). A bitrate is written canonically, and an
// empty Match becomes nil. Settings given are kept as they are.
func (r Rule) WithDefaults() Rule {
	d := r
	if d.Match.empty() {
		d.Match = nil
	}
	for i := range schema {
		if f := &schema[i]; f.table == tRule && !(f.limit && d.Action != DefaultAction) {
			f.fill(f.inRule(&d), &d)
		}
	}
	if d.Action != DefaultAction {
		return d
	}
	if d.Bitrate != "" {
		d.Bitrate = canonicalBitrate(d.Bitrate)
	}
	if r.FlowTimeout == 0 && d.Burst != nil { // else the rate is bad: no limiter
		d.FlowTimeout = max(d.FlowTimeout, minFlowTimeout(d.memory()))
	}
	return d
}

// fill sets the field p points at to f's default if it is not given (d:
// the rule being filled in, nil for [redis]).
func (f *field) fill(p any, d *Rule) {
	c := f.kind.codec()
	if f.implicit || c.given(p) || f.defIf != nil && !f.defIf(d) {
		return
	}
	v := f.deflt()
	if f.defFrom != nil {
		v = f.defFrom(d)
	}
	if v != nil {
		c.set(p, v)
	}
}

// defaultBurst is the burst of a rule without one: from its rate (5
// packets, or max(65535 bytes, 0.1 s of rate), at most shaper.MaxBurst);
// nil for a rate that is bad.
func defaultBurst(d *Rule) any {
	var c shaper.Config
	if d.PPS != nil {
		c.Rate = *d.PPS
	} else if v, err := shaper.ParseBitrate(d.Bitrate); err == nil {
		c.Rate, c.Bytes = v, true
	}
	if c.Rate > 0 {
		return c.LimiterConfig().Burst
	}
	return nil
}

// ownerKey reports whether d's key (given or default) is by uid or gid.
func ownerKey(d *Rule) bool {
	m, err := flows.ParseMode(d.Key)
	return err == nil && (m.By() == flows.ByUID || m.By() == flows.ByGID)
}

// WithDefaults returns a copy of f whose rules have their defaults filled
// in (Rule.WithDefaults).
func (f *File) WithDefaults() *File {
	g := &File{Name: f.Name, Rules: make([]Rule, len(f.Rules)), Redis: f.Redis.WithDefaults(), pos: f.pos}
	for i, r := range f.Rules {
		g.Rules[i] = r.WithDefaults()
	}
	return g
}

func ptr[T any](v T) *T { return &v }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// durations as written, for Format.
func formatDuration(d Duration) string { return time.Duration(d).String() }
