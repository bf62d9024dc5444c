package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	toml "github.com/pelletier/go-toml/v2"
)

// MaxFileSize caps what Load and Parse read: a rule file larger than this is
// refused rather than parsed.
const MaxFileSize = 16 << 20

// MaxMatchItems caps the items (addresses, ports, protocols, names, queues)
// of all the match tables of a file together.
const MaxMatchItems = 1 << 18

// MaxMatchBytes caps the compiled match tables: each item of a match list
// may take a set of the rules (a bit per rule) in the classifier. A file
// whose items × rules / 8 exceed it is refused at load, so that a reload
// never spends seconds and gigabytes compiling.
const MaxMatchBytes = 64 << 20

// File is a parsed rule file: its rules, in the order they are tried, and
// the store its global rules share.
type File struct {
	// Name is the file's path, used in errors.
	Name  string
	Rules []Rule
	// Redis is the [redis] table: where global rules keep their budgets.
	// Required when a rule is global; nil if not given.
	Redis *Redis

	// pos holds the position of each rule and field in the file Parse
	// read, for errors found later (Validate); nil for a File built in
	// code.
	pos *positions
}

// Rule is one [[rule]] table. Pointer fields and non-empty strings are the
// settings given; nil and "" mean the default (see WithDefaults). The
// limiter settings mean what the limiter flags of the same names mean.
type Rule struct {
	// Name is required and unique within the file: letters, digits, "_",
	// "." and "-".
	Name string `toml:"name"`
	// Match selects the rule's packets; nil (or empty) matches every
	// packet.
	Match *Match `toml:"match,omitempty"`
	// Action is "limit" (the default), "accept" or "drop".
	Action string `toml:"action,omitempty"`
	// Mode is "enforce" (the default) or "shadow": accept what the
	// limiter would drop, and count it. Limit rules only.
	Mode string `toml:"mode,omitempty"`
	// OnExceed is what happens to a packet over the limit: "drop" (the
	// default) or "mark": accept it with SetMark applied.
	OnExceed string `toml:"on-exceed,omitempty"`
	// SetMark is "VALUE" or "VALUE/MASK" (mask default 0xffffffff): an
	// over-limit packet's mark becomes (mark &^ MASK) | VALUE. Only with
	// OnExceed "mark".
	SetMark string `toml:"set-mark,omitempty"`
	// Key is what makes a flow: "5tuple" (the default), "src", "dst" or
	// "src-dst".
	Key string `toml:"key,omitempty"`
	// Prefix lengths flows are keyed by (defaults 32 and 128).
	SrcPrefix4 *int `toml:"src-prefix4,omitempty"`
	DstPrefix4 *int `toml:"dst-prefix4,omitempty"`
	SrcPrefix6 *int `toml:"src-prefix6,omitempty"`
	DstPrefix6 *int `toml:"dst-prefix6,omitempty"`
	// Symmetric makes both directions of a conversation one flow.
	Symmetric *bool `toml:"symmetric,omitempty"`
	// PPS (packets per second) or Bitrate ("2mbit", tc units): the
	// per-flow limit. A limit rule has exactly one of them.
	PPS     *float64 `toml:"pps,omitempty"`
	Bitrate string   `toml:"bitrate,omitempty"`
	// Burst is the token bucket's capacity in packets (with Bitrate:
	// bytes); default 5 packets, or max(65535 bytes, 0.1 s of rate).
	Burst *float64 `toml:"burst,omitempty"`
	// Algo is the limiter: "token-bucket" (the default), "fixed-window",
	// "sliding-window" or "sliding-window-counter"; or "leaky-bucket", the
	// token bucket shaping (Shape true).
	Algo string `toml:"algo,omitempty"`
	// Shape makes a token-bucket rule delay packets over the limit instead
	// of dropping them: one that would conform within MaxDelay is held
	// until it does, one that would wait longer is dropped (default
	// false; true with algo "leaky-bucket").
	Shape *bool `toml:"shape,omitempty"`
	// MaxDelay is how long a shaping rule holds a packet at most (default
	// 50ms, at most 10s). Only with Shape.
	MaxDelay Duration `toml:"max-delay,omitempty"`
	// Window is the window algorithms' window (default 1s).
	Window Duration `toml:"window,omitempty"`
	// MaxFlows caps the rule's flow table (default 65536).
	MaxFlows *int `toml:"max-flows,omitempty"`
	// FlowTimeout forgets a flow idle this long (default 60s).
	FlowTimeout Duration `toml:"flow-timeout,omitempty"`
	// Scope is "local" (the default: each host limits on its own) or
	// "global": one budget per flow key for every host running the rule,
	// kept in the [redis] store and taken in leases. Token-bucket and
	// fixed-window only.
	Scope string `toml:"scope,omitempty"`
	// GlobalSlack is the fraction of pps (or bitrate) × 1 s that all hosts
	// together may hold in leases of one key (default 0.01; global rules
	// only). More slack: fewer asks to the store, a looser bound.
	GlobalSlack *float64 `toml:"global-slack,omitempty"`
}

// Redis is the [redis] table: the store global rules share. Zero values
// mean the defaults (see WithDefaults).
type Redis struct {
	// Addrs are host:port addresses: one for a single server (or a
	// Valkey/Redis primary), or with Cluster the seeds of a Redis Cluster.
	Addrs []string `toml:"addrs"`
	// Cluster says Addrs are Redis Cluster nodes (default false).
	Cluster *bool `toml:"cluster,omitempty"`
	// PasswordFile names a file holding the password (AUTH), read when
	// packetshaper starts; "" for none.
	PasswordFile string `toml:"password-file,omitempty"`
	// Timeout bounds each request to the store (default 20ms); a store
	// slower than that for longer than a short grace is taken as gone.
	Timeout Duration `toml:"timeout,omitempty"`
	// KeyPrefix starts every key packetshaper writes (default
	// "packetshaper:").
	KeyPrefix *string `toml:"key-prefix,omitempty"`
	// Username is the ACL user to AUTH as (with the password); "" for
	// the default user.
	Username string `toml:"username,omitempty"`
	// TLS makes every connection to the store use TLS (default false).
	// CAFile names the PEM certificates that the server's must chain
	// to ("": the system's); CertFile and KeyFile a client certificate
	// and its key, both or neither (PEM); ServerName the name the
	// server's certificate must hold ("": the host of each address).
	TLS        *bool  `toml:"tls,omitempty"`
	CAFile     string `toml:"ca-file,omitempty"`
	CertFile   string `toml:"cert-file,omitempty"`
	KeyFile    string `toml:"key-file,omitempty"`
	ServerName string `toml:"server-name,omitempty"`
}

// Match is a rule's match table. Every field given must hold (AND); a list
// holds when any of its items does (OR). nil lists and "" are not given.
type Match struct {
	// Src and Dst: addresses or CIDRs, IPv4 or IPv6. An address without a
	// length is one host.
	Src []string `toml:"src,omitempty"`
	Dst []string `toml:"dst,omitempty"`
	// Proto: tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254
	// (written in TOML as a string or an integer).
	Proto []string `toml:"proto,omitempty"`
	// Sport and Dport: ports or "lo-hi" ranges. They match TCP, UDP,
	// UDP-Lite and SCTP packets only.
	Sport []string `toml:"sport,omitempty"`
	Dport []string `toml:"dport,omitempty"`
	// Iif and Oif: input and output interface names.
	Iif []string `toml:"iif,omitempty"`
	Oif []string `toml:"oif,omitempty"`
	// Family is "ipv4" or "ipv6".
	Family string `toml:"family,omitempty"`
	// Mark is "VALUE" or "VALUE/MASK": the packet's mark & MASK must be
	// VALUE (mask default 0xffffffff).
	Mark string `toml:"mark,omitempty"`
	// Queue: NFQUEUE queue numbers.
	Queue []int `toml:"queue,omitempty"`
}

func (m *Match) empty() bool {
	return m == nil || (m.Src == nil && m.Dst == nil && m.Proto == nil && m.Sport == nil && m.Dport == nil &&
		m.Iif == nil && m.Oif == nil && m.Family == "" && m.Mark == "" && m.Queue == nil)
}

// Duration is a length of time, written in TOML as a string that
// time.ParseDuration accepts ("1s", "50ms", "1m30s"). Zero means not given.
type Duration time.Duration

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a positive duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want a number with a unit, such as \"1s\" or \"500ms\"", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("must be positive, not %v", v)
	}
	return v, nil
}

// Error is what Load, Parse, Validate and Compile return: a problem with one
// field of one rule, at a place in the file. Its Error method writes one
// line, leaving out the parts that do not apply:
//
//	FILE:LINE:COL: rule "NAME": FIELD: problem
type Error struct {
	// File is the file's name (File.Name); Line and Col (1-based, Col in
	// bytes) are 0 when the problem has no place in a file (a File built
	// in code).
	File      string
	Line, Col int
	// Rule is the rule's name; Index its number (1-based, 0 for none),
	// shown when it has no name.
	Rule  string
	Index int
	// Field is the field, as written in the file ("pps", "match.dport"),
	// or "" for the rule or the file as a whole.
	Field string
	Msg   string
	// Problem says what kind of problem it is, for callers that word it
	// their own way (the command line, in flags); most are ProblemOther.
	Problem Problem
	// Needs is, with ProblemNeeds, the field needed ("shape",
	// "redis.addrs").
	Needs string
	// Err is the error Msg comes from, if any (Unwrap).
	Err error
}

// Problem classifies an Error.
type Problem uint8

const (
	ProblemOther Problem = iota
	// ProblemNoLimit: a limit rule with neither pps nor bitrate.
	ProblemNoLimit
	// ProblemNeeds: the field needs another setting (or table) given.
	ProblemNeeds
	// ProblemMissing: a required field is missing.
	ProblemMissing
)

// needs makes e a ProblemNeeds for the field named path.
func (e *Error) needs(path string) { e.Problem, e.Needs = ProblemNeeds, path }

// Unwrap is the error Msg comes from, or nil.
func (e *Error) Unwrap() error { return e.Err }

// wrap sets Msg, and Err to the error a %w in format wraps.
func (e *Error) wrap(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	e.Msg, e.Err = err.Error(), errors.Unwrap(err)
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
		}
		b.WriteString(": ")
	}
	switch {
	case e.Rule != "":
		fmt.Fprintf(&b, "rule %s: ", strconv.Quote(e.Rule))
	case e.Index > 0:
		fmt.Fprintf(&b, "rule #%d: ", e.Index)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads the rule file at path (at most MaxFileSize bytes) and parses
// it. The file must be a regular file: it is opened without blocking
// (O_NONBLOCK), so that a named pipe, a device or a socket at path is an
// error at once rather than a read that waits for a writer forever.
func Load(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &Error{File: path, Msg: ioProblem(err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{File: path, Msg: ioProblem(err)}
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: fmt.Sprintf("not a regular file (%s): a rule file must be one", fileKind(st.Mode()))}
	}
	if st.Size() > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file too large: more than %d bytes (16 MiB)", MaxFileSize)}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{File: path, Msg: ioProblem(err)}
	}
	return Parse(path, data)
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.Type().String()
}

// ioProblem is err without the path that Error already shows.
func ioProblem(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return "cannot " + pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// Parse decodes a rule file strictly (unknown fields, wrong types and
// duplicate keys are errors), validates every rule and checks that each
// compiles. name is the file's name for errors. Errors are *Error.
func Parse(name string, data []byte) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("file too large: more than %d bytes (16 MiB)", MaxFileSize)}
	}
	// The walk checks the document's shape against the schema, with
	// positions and messages in the file's terms; the decoder then fills
	// the values. The walk's error, if any, is the one to report: the
	// decoder sees the same problems (its positions less exact, its
	// messages in Go's terms) and a few more, such as integers that
	// overflow.
	ps, werr := walk(name, data)
	if werr != nil {
		return nil, werr
	}
	var raw rawFile
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&raw); err != nil {
		return nil, decodeError(name, ps, err)
	}
	f := &File{Name: name, pos: ps}
	errs := f.fromRaw(&raw)
	if err := f.Validate(); err != nil {
		errs.add(err.(*Error))
	}
	if err := errs.first(); err != nil {
		return nil, err
	}
	return f, nil
}

// decodeError turns the decoder's error into an *Error at its position.
func decodeError(name string, ps *positions, err error) *Error {
	var se *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &se) && len(se.Errors) > 0:
		de = &se.Errors[0]
	case errors.As(err, &de):
	default:
		return &Error{File: name, Msg: err.Error()}
	}
	line, col := de.Position()
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	e := &Error{File: name, Line: line, Col: col, Msg: msg}
	key := de.Key()
	if len(key) > 0 && key[0] == "rule" && ps != nil {
		if i := ps.ruleAt(pos{line, col}); i >= 0 {
			ps.label(e, i)
			e.Field = joinKey(key[1:])
			if f := ps.fieldAt(i, pos{line, col}); f != "" {
				e.Field = f
			}
		}
	} else if len(key) > 0 {
		e.Field = joinKey(key)
	}
	return e
}

func joinKey(key []string) string {
	s := make([]string, len(key))
	for i, k := range key {
		s[i] = keyText(k)
	}
	return strings.Join(s, ".")
}

// rawFile is what the decoder fills: the rule file as written, strings as
// pointers so that a given "" can be told from a missing field, lists that
// may mix strings and integers as []any.
type rawFile struct {
	Rule  []rawRule `toml:"rule"`
	Redis *rawRedis `toml:"redis"`
}

type rawRedis struct {
	Addrs        []string `toml:"addrs"`
	Cluster      *bool    `toml:"cluster"`
	PasswordFile *string  `toml:"password-file"`
	Timeout      *string  `toml:"timeout"`
	KeyPrefix    *string  `toml:"key-prefix"`
	Username     *string  `toml:"username"`
	TLS          *bool    `toml:"tls"`
	CAFile       *string  `toml:"ca-file"`
	CertFile     *string  `toml:"cert-file"`
	KeyFile      *string  `toml:"key-file"`
	ServerName   *string  `toml:"server-name"`
}

type rawRule struct {
	Name        *string   `toml:"name"`
	Match       *rawMatch `toml:"match"`
	Action      *string   `toml:"action"`
	Mode        *string   `toml:"mode"`
	OnExceed    *string   `toml:"on-exceed"`
	SetMark     *string   `toml:"set-mark"`
	Key         *string   `toml:"key"`
	SrcPrefix4  *int      `toml:"src-prefix4"`
	DstPrefix4  *int      `toml:"dst-prefix4"`
	SrcPrefix6  *int      `toml:"src-prefix6"`
	DstPrefix6  *int      `toml:"dst-prefix6"`
	Symmetric   *bool     `toml:"symmetric"`
	PPS         *float64  `toml:"pps"`
	Bitrate     *string   `toml:"bitrate"`
	Burst       *float64  `toml:"burst"`
	Algo        *string   `toml:"algo"`
	Shape       *bool     `toml:"shape"`
	MaxDelay    *string   `toml:"max-delay"`
	Window      *string   `toml:"window"`
	MaxFlows    *int      `toml:"max-flows"`
	FlowTimeout *string   `toml:"flow-timeout"`
	Scope       *string   `toml:"scope"`
	GlobalSlack *float64  `toml:"global-slack"`
}

type rawMatch struct {
	Src    []string `toml:"src"`
	Dst    []string `toml:"dst"`
	Proto  []any    `toml:"proto"`
	Sport  []any    `toml:"sport"`
	Dport  []any    `toml:"dport"`
	Iif    []string `toml:"iif"`
	Oif    []string `toml:"oif"`
	Family *string  `toml:"family"`
	Mark   *string  `toml:"mark"`
	Queue  []int    `toml:"queue"`
}

// fromRaw fills f.Rules from what the decoder read. It reports the
// problems that the File's types cannot carry: strings given empty, bad
// durations, list items of a wrong type. The walk has checked the TOML
// types already.
func (f *File) fromRaw(raw *rawFile) errList {
	var errs errList
	str := func(i int, field string, p *string) string {
		if p == nil {
			return ""
		}
		if *p == "" {
			errs.add(f.errAt(i, field, -1, "must not be empty"))
		}
		return *p
	}
	dur := func(i int, field string, p *string) Duration {
		if p == nil {
			return 0
		}
		d, err := parseDuration(*p)
		if err != nil {
			errs.add(f.errAt(i, field, -1, "%w", err))
		}
		return Duration(d)
	}
	items := func(i int, field string, in []any) []string {
		if in == nil {
			return nil
		}
		out := make([]string, len(in))
		for j, v := range in {
			switch v := v.(type) {
			case string:
				out[j] = v
			case int64:
				out[j] = strconv.FormatInt(v, 10)
			default:
				errs.add(f.errAt(i, field, j, "want strings or integers, not %T", v))
			}
		}
		return out
	}
	f.Rules = make([]Rule, len(raw.Rule))
	for i := range raw.Rule {
		rr := &raw.Rule[i]
		r := &f.Rules[i]
		if rr.Name != nil {
			r.Name = *rr.Name
		}
		r.Action = str(i, "action", rr.Action)
		r.Mode = str(i, "mode", rr.Mode)
		r.OnExceed = str(i, "on-exceed", rr.OnExceed)
		r.SetMark = str(i, "set-mark", rr.SetMark)
		r.Key = str(i, "key", rr.Key)
		r.SrcPrefix4, r.DstPrefix4, r.SrcPrefix6, r.DstPrefix6 = rr.SrcPrefix4, rr.DstPrefix4, rr.SrcPrefix6, rr.DstPrefix6
		r.Symmetric = rr.Symmetric
		r.PPS = rr.PPS
		r.Bitrate = str(i, "bitrate", rr.Bitrate)
		r.Burst = rr.Burst
		r.Algo = str(i, "algo", rr.Algo)
		r.Shape = rr.Shape
		r.MaxDelay = dur(i, "max-delay", rr.MaxDelay)
		r.Window = dur(i, "window", rr.Window)
		r.MaxFlows = rr.MaxFlows
		r.FlowTimeout = dur(i, "flow-timeout", rr.FlowTimeout)
		r.Scope = str(i, "scope", rr.Scope)
		r.GlobalSlack = rr.GlobalSlack
		if m := rr.Match; m != nil {
			r.Match = &Match{
				Src: m.Src, Dst: m.Dst,
				Proto: items(i, "match.proto", m.Proto),
				Sport: items(i, "match.sport", m.Sport),
				Dport: items(i, "match.dport", m.Dport),
				Iif:   m.Iif, Oif: m.Oif,
				Family: str(i, "match.family", m.Family),
				Mark:   str(i, "match.mark", m.Mark),
				Queue:  m.Queue,
			}
			if r.Match.empty() {
				r.Match = nil
			}
		}
	}
	if rr := raw.Redis; rr != nil {
		rd := &Redis{Addrs: rr.Addrs, Cluster: rr.Cluster, KeyPrefix: rr.KeyPrefix, TLS: rr.TLS}
		for _, s := range []struct {
			field string
			raw   *string
			to    *string
		}{
			{"redis.password-file", rr.PasswordFile, &rd.PasswordFile},
			{"redis.username", rr.Username, &rd.Username},
			{"redis.ca-file", rr.CAFile, &rd.CAFile},
			{"redis.cert-file", rr.CertFile, &rd.CertFile},
			{"redis.key-file", rr.KeyFile, &rd.KeyFile},
			{"redis.server-name", rr.ServerName, &rd.ServerName},
		} {
			if s.raw != nil {
				if *s.raw == "" {
					errs.add(f.redisErr(s.field, -1, "must not be empty"))
				}
				*s.to = *s.raw
			}
		}
		if rr.Timeout != nil {
			d, err := parseDuration(*rr.Timeout)
			if err != nil {
				errs.add(f.redisErr("redis.timeout", -1, "%w", err))
			}
			rd.Timeout = Duration(d)
		}
		f.Redis = rd
	}
	return errs
}

// redisErr makes an error about a field of the [redis] table (item j of a
// list, or -1), at its place in the file when Parse read it.
func (f *File) redisErr(field string, j int, format string, args ...any) *Error {
	e := &Error{File: f.Name, Field: field}
	e.wrap(format, args...)
	if f.pos != nil {
		p := f.pos.redisAt(field, j)
		e.Line, e.Col = p.line, p.col
	}
	return e
}

// errList collects errors and reports the first in the file (or, without
// positions, the first found).
type errList []*Error

func (l *errList) add(e *Error) { *l = append(*l, e) }

func (l errList) first() error {
	var best *Error
	for _, e := range l {
		if best == nil || (e.Line > 0 && best.Line > 0 && (e.Line < best.Line || e.Line == best.Line && e.Col < best.Col)) {
			best = e
		}
	}
	if best == nil {
		return nil
	}
	return best
}

// errAt makes an error about rule i's field (item j of a list, or -1), at
// its place in the file when Parse read it.
func (f *File) errAt(i int, field string, j int, format string, args ...any) *Error {
	e := &Error{File: f.Name, Field: field}
	e.wrap(format, args...)
	if i >= 0 {
		if i < len(f.Rules) && f.Rules[i].Name != "" {
			e.Rule = f.Rules[i].Name
		} else {
			e.Index = i + 1
		}
	}
	if f.pos != nil {
		p := f.pos.at(i, field, j)
		e.Line, e.Col = p.line, p.col
	}
	return e
}
