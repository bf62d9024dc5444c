package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	// Totals are the [[total]] tables: limits that several limit rules
	// charge together (Rule.Total), beside each flow's own limit.
	Totals []TotalDef

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
	Name string
	// Match selects the rule's packets; nil (or empty) matches every
	// packet.
	Match *Match
	// Action is "limit" (the default), "accept" or "drop".
	Action string
	// Mode is "enforce" (the default) or "shadow": accept what the
	// limiter would drop, and count it. Limit rules only.
	Mode string
	// OnExceed is what happens to a packet over the limit: "drop" (the
	// default) or "mark": accept it with SetMark applied.
	OnExceed string
	// SetMark is "VALUE" or "VALUE/MASK" (mask default 0xffffffff): an
	// over-limit packet's mark becomes (mark &^ MASK) | VALUE. Only with
	// OnExceed "mark".
	SetMark string
	// Key is what makes a flow: "5tuple" (the default), "src", "dst" or
	// "src-dst"; "uid", "gid" or "mark" (the packet's owner); or an owner
	// joined to src, dst or src-dst ("uid+dst").
	Key string
	// KeyMarkMask is the part of the mark a mark key keys by ("0xff00";
	// default all of it). Only with a mark key.
	KeyMarkMask string
	// NoOwner is what a uid or gid key does with packets that have no
	// owner: "accept-replies" (the default: the kernel's own replies pass,
	// the rest is one flow, "no owner"), "limit", "accept" or
	// "key-by-dst" (flows.NoOwner). Only with a uid or gid key.
	NoOwner string
	// Prefix lengths flows are keyed by (defaults 32 and 128).
	SrcPrefix4 *int
	DstPrefix4 *int
	SrcPrefix6 *int
	DstPrefix6 *int
	// Symmetric makes both directions of a conversation one flow.
	Symmetric *bool
	// PPS (packets per second) or Bitrate ("2mbit", tc units): the
	// per-flow limit. A limit rule has exactly one of them.
	PPS     *float64
	Bitrate string
	// Burst is the token bucket's capacity in packets (with Bitrate:
	// bytes); default 5 packets, or max(65535 bytes, 0.1 s of rate).
	Burst *float64
	// Algo is the limiter: "token-bucket" (the default), "fixed-window",
	// "sliding-window" or "sliding-window-counter"; or "leaky-bucket", the
	// token bucket shaping (Shape true).
	Algo string
	// Shape makes a token-bucket rule delay packets over the limit instead
	// of dropping them: one that would conform within MaxDelay is held
	// until it does, one that would wait longer is dropped (default
	// false; true with algo "leaky-bucket").
	Shape *bool
	// MaxDelay is how long a shaping rule holds a packet at most (default
	// 50ms, at most 10s). Only with Shape.
	MaxDelay Duration
	// Window is the window algorithms' window (default 1s).
	Window Duration
	// MaxFlows caps the rule's flow table (default 65536).
	MaxFlows *int
	// FlowTimeout forgets a flow idle this long (default 60s).
	FlowTimeout Duration
	// Scope is "local" (the default: each host limits on its own) or
	// "global": one budget per flow key for every host running the rule,
	// kept in the [redis] store and taken in leases. Token-bucket and
	// fixed-window only.
	Scope string
	// GlobalSlack is the fraction of pps (or bitrate) × 1 s that all hosts
	// together may hold in leases of one key (default 0.01; global rules
	// only). More slack: fewer asks to the store, a looser bound.
	GlobalSlack *float64
	// Total names a [[total]] the rule's packets charge beside their
	// flow's limit: a packet passes only if both allow it. Policing limit
	// rules only (not shaping, not global).
	Total string
	// OwnTotal is the rule's own total, a [rule.total] table (total = {
	// ... }): as a [[total]] only this rule charges. Not with Total.
	OwnTotal *TotalDef
}

// Redis is the [redis] table: the store global rules share. Zero values
// mean the defaults (see WithDefaults).
type Redis struct {
	// Addrs are host:port addresses: one for a single server (or a
	// Valkey/Redis primary), or with Cluster the seeds of a Redis Cluster.
	Addrs []string
	// Cluster says Addrs are Redis Cluster nodes (default false).
	Cluster *bool
	// PasswordFile names a file holding the password (AUTH), read when
	// packetshaper starts; "" for none.
	PasswordFile string
	// Timeout bounds each request to the store (default 20ms); a store
	// slower than that for longer than a short grace is taken as gone.
	Timeout Duration
	// RefreshInterval is how often a host asks for a key above its
	// limit (default 1s): the hosts hold at most rate × max(this,
	// global-slack × 1 s) of a key (the bound's slack), and a hot key
	// costs about hosts ÷ this asks a second.
	RefreshInterval Duration
	// Leases is how global token-bucket rules lease their keys (default
	// "rate"): "rate", a share of the rate for an interval and a burst
	// bucket (about hosts ÷ RefreshInterval asks a second per hot key),
	// or "token", tokens handed out from the store's bucket (about
	// max(hosts ÷ RefreshInterval, 2 × rate ÷ burst)).
	Leases string
	// KeyPrefix starts every key packetshaper writes (default
	// "packetshaper:").
	KeyPrefix *string
	// Username is the ACL user to AUTH as (with the password); "" for
	// the default user.
	Username string
	// TLS makes every connection to the store use TLS (default false).
	// CAFile names the PEM certificates that the server's must chain
	// to ("": the system's); CertFile and KeyFile a client certificate
	// and its key, both or neither (PEM); ServerName the name the
	// server's certificate must hold ("": the host of each address).
	TLS        *bool
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
}

// Match is a rule's match table. Every field given must hold (AND); a list
// holds when any of its items does (OR). nil lists and "" are not given.
type Match struct {
	// Src and Dst: addresses or CIDRs, IPv4 or IPv6. An address without a
	// length is one host.
	Src []string
	Dst []string
	// Proto: tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254
	// (written in TOML as a string or an integer).
	Proto []string
	// Sport and Dport: ports or "lo-hi" ranges. They match TCP, UDP,
	// UDP-Lite and SCTP packets only.
	Sport []string
	Dport []string
	// Iif and Oif: input and output interface names.
	Iif []string
	Oif []string
	// Family is "ipv4" or "ipv6".
	Family string
	// Mark is "VALUE" or "VALUE/MASK": the packet's mark & MASK must be
	// VALUE (mask default 0xffffffff).
	Mark string
	// Queue: NFQUEUE queue numbers.
	Queue []int
	// UID and GID: the uid or gid of the local socket that sent the
	// packet, as numbers or "lo-hi" ranges (written in TOML as strings or
	// integers). A packet without an owner (forwarded, incoming, a reply
	// the kernel made) matches neither.
	UID []string
	GID []string
	// TCPFlags: "syn" (SYN set, ACK, RST and FIN clear: iptables' --syn)
	// or "FLAGS/MASK" ("syn/syn,ack"). TCP packets only.
	TCPFlags []string
	// ICMPType: names ("echo-request": ICMP's and ICMPv6's), numbers
	// (the type in both) or "icmp:N" / "icmpv6:N". ICMP and ICMPv6
	// packets only.
	ICMPType []string
	// Length: IP lengths in bytes or "lo-hi" ranges.
	Length []string
	// DSCP: numbers 0-63 or class names (ef, af41, cs1).
	DSCP []string
	// CtState: connection tracking states: new, established, related,
	// invalid, untracked.
	CtState []string
}

func (m *Match) empty() bool {
	return m == nil || (m.Src == nil && m.Dst == nil && m.Proto == nil && m.Sport == nil && m.Dport == nil &&
		m.Iif == nil && m.Oif == nil && m.Family == "" && m.Mark == "" && m.Queue == nil && m.UID == nil && m.GID == nil &&
		m.TCPFlags == nil && m.ICMPType == nil && m.Length == nil && m.DSCP == nil && m.CtState == nil)
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
	// One walk over the document checks its shape against the schema,
	// with positions and messages in the file's terms, and decodes it.
	f, errs, werr := walk(name, data)
	if werr != nil {
		return nil, werr
	}
	if err := f.Validate(); err != nil {
		errs.add(err.(*Error))
	}
	if err := errs.first(); err != nil {
		return nil, err
	}
	return f, nil
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
