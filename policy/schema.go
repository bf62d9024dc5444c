package policy

import (
	"fmt"
	"strconv"

	"github.com/packetshaper/packetshaper/flows"
	"sort"

	"github.com/packetshaper/packetshaper/shaper"
)

// The rule file's schema, declared once: each field's name, table, TOML
// kind, default, engine setting, command-line flag and help. The walk
// decodes and checks the document against it, Validate maps engine errors
// to fields through it, Format writes fields in its order, the limiter flags
// are defined from it, and docs/configuration-reference.md is generated from
// it (go generate ./policy; TestReferenceUpToDate fails when it is stale).

//go:generate go run ../internal/schemagen -o ../docs/configuration-reference.md

// table is the table a field belongs to.
type table uint8

const (
	tRule table = iota
	tMatch
	tRedis
	tTotal
)

// tableNames are the tables as the reference heads them.
var tableNames = [...]string{tRule: "[[rule]]", tMatch: "[rule.match] (or match = { ... })", tRedis: "[redis]", tTotal: "[[total]] (or a rule's own: [rule.total], total = { ... }, without name)"}

// kind is a field's TOML type.
type kind int

const (
	kString    kind = iota
	kOptString      // a string that may be given empty (**string)
	kInt
	kNumber // integer or float
	kBool
	kTable
	kStrings
	kStringsOrInts
	kInts
	kDuration // a string time.ParseDuration reads
	kPrefix4  // an IPv4 prefix length, 1-32 (default 32: the whole address)
	kPrefix6  // an IPv6 prefix length, 1-128 (default 128)
)

// field declares one field of the rule file.
type field struct {
	table table
	name  string // as written in its table: "flow-timeout"
	kind  kind
	// def is the default: a value of the kind's type (string, Duration,
	// int, float64, bool; codec.set), or nil for none. WithDefaults fills
	// it in where the field is left out, when defIf (nil: always) holds;
	// defFrom, if set, computes it instead from the settings before the
	// field in the schema (nil result: none applies).
	def     any
	defIf   func(d *Rule) bool
	defFrom func(d *Rule) any
	// defNote follows the default in the reference (or is all of it
	// without def): when it applies, or how defFrom computes it.
	defNote string
	// implicit: leaving the field out means def, and WithDefaults leaves
	// it out (check does not write it).
	implicit bool
	// limit marks the settings only limit rules take.
	limit bool
	// required: Validate reports the field missing (or empty).
	required bool
	// settings are the engine settings (shaper.ConfigError) the field
	// sets: an engine error about one of them is reported at the field.
	settings []shaper.Setting
	// flag is the command-line flag that sets the field ("" for none).
	flag string
	// flagSets makes flag a bool flag that sets the field to this value
	// (--global: scope = "global").
	flagSets string
	help     string
	// comment is what Format writes after the field of a rule with its
	// defaults (d), or nil.
	comment func(d *Rule) string
	// inRule, inMatch, inRedis or inTotal (by table) is a pointer to the
	// field in a Rule, Match, Redis or TotalDef: *string, *Duration,
	// **int, **float64, **bool, **string, *[]string, *[]int or **Match.
	inRule  func(*Rule) any
	inMatch func(*Match) any
	inRedis func(*Redis) any
	inTotal func(*TotalDef) any
}

// schema is every field, in the order Format writes them.
var schema = []field{
	{table: tRule, name: "name", inRule: func(r *Rule) any { return &r.Name }, kind: kString, help: "Required, unique within the file: letters, digits, \"_\", \".\" and \"-\"."},
	{table: tRule, name: "match", inRule: func(r *Rule) any { return &r.Match }, kind: kTable, help: "The rule's match table (below); none matches every packet."},
	{table: tRule, name: "action", inRule: func(r *Rule) any { return &r.Action }, kind: kString, def: DefaultAction, help: "limit, accept or drop."},
	{table: tRule, name: "mode", inRule: func(r *Rule) any { return &r.Mode }, kind: kString, def: DefaultMode, limit: true, help: "enforce, or shadow: accept what the limiter would drop, and count it."},
	{table: tRule, name: "on-exceed", inRule: func(r *Rule) any { return &r.OnExceed }, kind: kString, def: DefaultOnExceed, limit: true, help: "What happens to a packet over the limit: drop, or mark (accept it with set-mark applied)."},
	{table: tRule, name: "set-mark", inRule: func(r *Rule) any { return &r.SetMark }, kind: kString, limit: true, help: "\"VALUE\" or \"VALUE/MASK\" (mask default 0xffffffff): an over-limit packet's mark becomes (mark &^ MASK) | VALUE. Only with on-exceed = \"mark\"."},
	{table: tRule, name: "pps", inRule: func(r *Rule) any { return &r.PPS }, kind: kNumber, limit: true, settings: []shaper.Setting{shaper.SettingRate}, flag: "pps",
		help: "Per-flow limit: N packets per second; fractions allowed (pps 0.5 with window 10s is 5 per 10 s). A limit rule has pps or bitrate."},
	{table: tRule, name: "bitrate", inRule: func(r *Rule) any { return &r.Bitrate }, kind: kString, limit: true, settings: []shaper.Setting{shaper.SettingRate}, flag: "bitrate",
		help: "Per-flow limit: RATE in bits per second, tc-style: 500kbit, 10mbit, 1gbit (kbps/mbps are bytes per second, as in tc, and accepted with a warning); a packet costs its IP length. check prints it in bits (kbit, mbit, gbit) with its bits per second.", comment: bitrateComment},
	{table: tRule, name: "burst", inRule: func(r *Rule) any { return &r.Burst }, kind: kNumber, defFrom: defaultBurst, defNote: "5 packets, or with bitrate max(65535 bytes, 0.1 s of rate)", limit: true, settings: []shaper.Setting{shaper.SettingBurst}, flag: "burst",
		help: "Token bucket capacity in packets (with bitrate: bytes).", comment: burstComment},
	{table: tRule, name: "algo", inRule: func(r *Rule) any { return &r.Algo }, kind: kString, def: DefaultAlgo, limit: true, settings: []shaper.Setting{shaper.SettingAlgorithm}, flag: "algo",
		help: "Limiter: token-bucket, fixed-window, sliding-window (exact log, packets only) or sliding-window-counter; or leaky-bucket, the token bucket shaping (shape)."},
	{table: tRule, name: "shape", inRule: func(r *Rule) any { return &r.Shape }, kind: kBool, def: false, defFrom: func(d *Rule) any { return d.Algo == ShapeAlgo }, defNote: " (true with algo leaky-bucket)", limit: true, settings: []shaper.Setting{shaper.SettingShape}, flag: "shape",
		help: "Shape instead of police (token bucket only): hold a packet over the limit until the rate allows it, up to max-delay, and drop only what would wait longer."},
	{table: tRule, name: "max-delay", inRule: func(r *Rule) any { return &r.MaxDelay }, kind: kDuration, def: DefaultMaxDelay, defIf: func(d *Rule) bool { return *d.Shape }, limit: true, settings: []shaper.Setting{shaper.SettingMaxDelay}, flag: "max-delay",
		help: "With shape: the longest a packet is held (at most 10s); the queue holds burst + rate × max-delay."},
	{table: tRule, name: "window", inRule: func(r *Rule) any { return &r.Window }, kind: kDuration, def: Duration(shaper.DefaultWindow), limit: true, settings: []shaper.Setting{shaper.SettingWindow}, flag: "window",
		help: "Window length of the window algorithms (windows align to multiples of it since the Unix epoch).", comment: windowComment},
	{table: tRule, name: "key", inRule: func(r *Rule) any { return &r.Key }, kind: kString, def: DefaultKey, limit: true, settings: []shaper.Setting{shaper.SettingKey}, flag: "key",
		help: "What makes a flow: 5tuple, src, dst or src-dst (like hashlimit's --hashlimit-mode); uid or gid (of the local socket that sent the packet: packets without one share one flow, \"no owner\") or mark (key-mark-mask picks its bits); or one of these three joined to src, dst or src-dst: \"uid+dst\" is one flow per user per destination."},
	{table: tRule, name: "no-owner", inRule: func(r *Rule) any { return &r.NoOwner }, kind: kString, def: DefaultNoOwner, defIf: ownerKey, limit: true,
		help: "With a uid or gid key, what packets without an owner get (replies the kernel makes itself: SYN-ACK, RST, the ACKs of closed connections, ICMP errors; on INPUT or FORWARD every packet): accept-replies (those replies pass, no payload and one per packet that came in; every other ownerless packet is one flow, \"no owner\"), limit (all of them one flow, \"no owner\", the replies too: a flood's RSTs then starve the host's handshakes), accept (all pass: the rule limits known owners only) or key-by-dst (one flow per destination address, \"no owner dst ADDR\")."},
	{table: tRule, name: "key-mark-mask", inRule: func(r *Rule) any { return &r.KeyMarkMask }, kind: kString, def: "0xffffffff", implicit: true, limit: true, settings: []shaper.Setting{shaper.SettingMarkMask},
		help: "With a mark key: the bits of the mark that make the flow (\"0xff00\": marks 0x1200 and 0x12ff are one flow)."},
	{table: tRule, name: "src-prefix4", inRule: func(r *Rule) any { return &r.SrcPrefix4 }, kind: kPrefix4, limit: true, settings: []shaper.Setting{shaper.SettingPrefix}, flag: "src-prefix4",
		help: "IPv4 source prefix length a flow is keyed by (24 = one limit per /24)."},
	{table: tRule, name: "dst-prefix4", inRule: func(r *Rule) any { return &r.DstPrefix4 }, kind: kPrefix4, limit: true, settings: []shaper.Setting{shaper.SettingPrefix}, flag: "dst-prefix4",
		help: "IPv4 destination prefix length."},
	{table: tRule, name: "src-prefix6", inRule: func(r *Rule) any { return &r.SrcPrefix6 }, kind: kPrefix6, limit: true, settings: []shaper.Setting{shaper.SettingPrefix}, flag: "src-prefix6",
		help: "IPv6 source prefix length (64 = one limit per /64)."},
	{table: tRule, name: "dst-prefix6", inRule: func(r *Rule) any { return &r.DstPrefix6 }, kind: kPrefix6, limit: true, settings: []shaper.Setting{shaper.SettingPrefix}, flag: "dst-prefix6",
		help: "IPv6 destination prefix length."},
	{table: tRule, name: "symmetric", inRule: func(r *Rule) any { return &r.Symmetric }, kind: kBool, def: false, limit: true, settings: []shaper.Setting{shaper.SettingSymmetric}, flag: "symmetric",
		help: "Count both directions of a conversation as one flow."},
	{table: tRule, name: "max-flows", inRule: func(r *Rule) any { return &r.MaxFlows }, kind: kInt, def: flows.DefaultMaxFlows, limit: true, settings: []shaper.Setting{shaper.SettingMaxFlows}, flag: "max-flows",
		help: "Flow table cap (about 180 bytes per flow); when full, a flow seen once is evicted before any that keeps sending."},
	{table: tRule, name: "flow-timeout", inRule: func(r *Rule) any { return &r.FlowTimeout }, kind: kDuration, def: Duration(shaper.DefaultFlowTimeout), defNote: ", raised with a warning to what the limiter remembers of an idle flow when longer", limit: true, settings: []shaper.Setting{shaper.SettingFlowTimeout}, flag: "flow-timeout",
		help: "Forget a flow after this long without packets. One given shorter than what the limiter remembers of an idle flow (burst / rate, the window, 2 windows for sliding-window-counter) is refused."},
	{table: tRule, name: "scope", inRule: func(r *Rule) any { return &r.Scope }, kind: kString, def: DefaultScope, limit: true, settings: []shaper.Setting{shaper.SettingGlobal}, flag: "global", flagSets: "global",
		help: "local (each host limits on its own) or global: one budget per flow key for every host running the rule, kept in the [redis] store and taken in leases (token-bucket and fixed-window only). The flag --global is scope = \"global\"."},
	{table: tRule, name: "global-slack", inRule: func(r *Rule) any { return &r.GlobalSlack }, kind: kNumber, def: DefaultGlobalSlack, defIf: func(d *Rule) bool { return d.Scope == "global" }, defNote: " (global rules)", limit: true, settings: []shaper.Setting{shaper.SettingGlobalSlack}, flag: "global-slack",
		help:    "Global rules: the fraction of the rate × 1 s that all hosts together may hold in leases of one key. More slack: fewer asks to the store, a looser bound.",
		comment: func(*Rule) string { return "fraction of the rate × 1 s all hosts may hold in leases" }},
	{table: tRule, name: "total", inRule: func(r *Rule) any { return &r.Total }, kind: kString, limit: true,
		help: "The name of a [[total]] (or, as a table, the rule's own total: [rule.total] with the fields of [[total]] but name) the rule's packets charge beside their flow's limit: a packet passes only if its flow and the total both allow it, and is charged to both only then; several rules may charge one total. With shape = true the packets wait until both allow, and the total's rate is shared fairly (max-min) among the keys with packets waiting; a shaping rule's total is a token bucket. Not with scope = \"global\"; a rule with a total runs in user space, not in the kernel fast path."},

	{table: tMatch, name: "family", inMatch: func(m *Match) any { return &m.Family }, kind: kString, help: "ipv4 or ipv6."},
	{table: tMatch, name: "src", inMatch: func(m *Match) any { return &m.Src }, kind: kStrings, help: "Source addresses or CIDRs, IPv4 or IPv6; an address without a length is one host."},
	{table: tMatch, name: "dst", inMatch: func(m *Match) any { return &m.Dst }, kind: kStrings, help: "Destination addresses or CIDRs."},
	{table: tMatch, name: "proto", inMatch: func(m *Match) any { return &m.Proto }, kind: kStringsOrInts, help: "tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254."},
	{table: tMatch, name: "sport", inMatch: func(m *Match) any { return &m.Sport }, kind: kStringsOrInts, help: "Source ports or \"lo-hi\" ranges (TCP, UDP, UDP-Lite and SCTP packets only)."},
	{table: tMatch, name: "dport", inMatch: func(m *Match) any { return &m.Dport }, kind: kStringsOrInts, help: "Destination ports or \"lo-hi\" ranges."},
	{table: tMatch, name: "iif", inMatch: func(m *Match) any { return &m.Iif }, kind: kStrings, help: "Input interface names."},
	{table: tMatch, name: "oif", inMatch: func(m *Match) any { return &m.Oif }, kind: kStrings, help: "Output interface names."},
	{table: tMatch, name: "mark", inMatch: func(m *Match) any { return &m.Mark }, kind: kString, help: "\"VALUE\" or \"VALUE/MASK\": the packet's mark & MASK must be VALUE (mask default 0xffffffff)."},
	{table: tMatch, name: "uid", inMatch: func(m *Match) any { return &m.UID }, kind: kStringsOrInts, help: "Uids of the local socket that sent the packet, or \"lo-hi\" ranges (\"1000-1999\"). Packets without an owner (forwarded, incoming, replies the kernel makes) never match."},
	{table: tMatch, name: "gid", inMatch: func(m *Match) any { return &m.GID }, kind: kStringsOrInts, help: "Gids of the sending socket, or \"lo-hi\" ranges, as uid."},
	{table: tMatch, name: "queue", inMatch: func(m *Match) any { return &m.Queue }, kind: kInts, help: "NFQUEUE queue numbers."},
	{table: tMatch, name: "tcp-flags", inMatch: func(m *Match) any { return &m.TCPFlags }, kind: kStrings, help: "TCP packets whose flags are: \"syn\" (SYN set, ACK, RST and FIN clear: iptables' --syn, a connection's first packet), or \"FLAGS/MASK\": of the flags in MASK exactly those in FLAGS are set (\"syn/syn,ack\", \"rst/rst\", \"none/fin,syn,rst,psh,ack,urg\"; flags fin, syn, rst, psh, ack, urg, ece, cwr, or a number). Flags a packet hides (a later fragment, a header cut short) meet limit and drop rules' constraints, not accept rules'."},
	{table: tMatch, name: "icmp-type", inMatch: func(m *Match) any { return &m.ICMPType }, kind: kStringsOrInts, help: "ICMP and ICMPv6 packets of these types: names (echo-request, echo-reply, destination-unreachable, time-exceeded, parameter-problem, redirect, router-advertisement, router-solicitation: each family's type; source-quench, timestamp-request, timestamp-reply, info-request, info-reply, address-mask-request, address-mask-reply: ICMP only; packet-too-big, mld-listener-query, mld-listener-report, mld-listener-done, neighbor-solicitation, neighbor-advertisement, mld2-listener-report: ICMPv6 only), a number 0-255 (that type in ICMP and in ICMPv6), or \"icmp:N\" or \"icmpv6:N\" (one family's)."},
	{table: tMatch, name: "length", inMatch: func(m *Match) any { return &m.Length }, kind: kStringsOrInts, help: "IP lengths in bytes (the packet's whole length, header included, as iptables' -m length), or \"lo-hi\" ranges (\"0-128\")."},
	{table: tMatch, name: "dscp", inMatch: func(m *Match) any { return &m.DSCP }, kind: kStringsOrInts, help: "DSCP values 0-63 (the IPv4 TOS's or IPv6 traffic class's upper six bits) or class names: ef, af11-af43, cs0-cs7, va, le."},
	{table: tMatch, name: "ct-state", inMatch: func(m *Match) any { return &m.CtState }, kind: kStrings, help: "Connection tracking states, as iptables' --ctstate: new (a connection's first packet: for TCP a SYN), established, related, invalid, untracked. Live, the kernel's conntrack gives them (NFQUEUE does not tell invalid from untracked: a packet without a state meets both); in replay, packetshaper's own tracker (see docs/replay.md). Where the state is unknown (a kernel that refused to send it) the constraint holds for limit and drop rules, not accept rules."},

	{table: tTotal, name: "name", inTotal: func(t *TotalDef) any { return &t.Name }, kind: kString, help: "Required, unique among the totals: letters, digits, \"_\", \".\" and \"-\"; rules name it in total."},
	{table: tTotal, name: "pps", inTotal: func(t *TotalDef) any { return &t.PPS }, kind: kNumber, settings: []shaper.Setting{shaper.SettingRate}, help: "The total's limit: N packets per second over everything its rules pass together. A total has pps or bitrate."},
	{table: tTotal, name: "bitrate", inTotal: func(t *TotalDef) any { return &t.Bitrate }, kind: kString, settings: []shaper.Setting{shaper.SettingRate}, help: "The total's limit in bits per second, as a rule's bitrate; a packet costs its IP length."},
	{table: tTotal, name: "burst", inTotal: func(t *TotalDef) any { return &t.Burst }, kind: kNumber, defNote: "5 packets, or with bitrate max(65535 bytes, 0.1 s of rate)", settings: []shaper.Setting{shaper.SettingBurst}, help: "Token bucket capacity in packets (with bitrate: bytes)."},
	{table: tTotal, name: "algo", inTotal: func(t *TotalDef) any { return &t.Algo }, kind: kString, def: DefaultAlgo, settings: []shaper.Setting{shaper.SettingAlgorithm}, help: "token-bucket, fixed-window or sliding-window-counter (not sliding-window, not leaky-bucket: a total is a limit, and shapes when a shaping rule charges it, which needs token-bucket)."},
	{table: tTotal, name: "window", inTotal: func(t *TotalDef) any { return &t.Window }, kind: kDuration, def: Duration(shaper.DefaultWindow), settings: []shaper.Setting{shaper.SettingWindow}, help: "Window length of the window algorithms."},
	{table: tTotal, name: "scope", inTotal: func(t *TotalDef) any { return &t.Scope }, kind: kString, def: DefaultScope, help: "local (each host caps its own packets) or global: one cap for every host running the policy, kept in the [redis] store and taken in leases like a global rule's one key, each flow's own limit still local (token-bucket and fixed-window only; not charged by shaping rules). Replay runs it as local."},

	{table: tRedis, name: "addrs", inRedis: func(r *Redis) any { return &r.Addrs }, kind: kStrings, flag: "redis", help: "host:port addresses: one for a single server (or a Valkey/Redis primary), or with cluster the seeds of a Redis Cluster (flag: comma-separated)."},
	{table: tRedis, name: "cluster", inRedis: func(r *Redis) any { return &r.Cluster }, kind: kBool, def: false, help: "addrs are Redis Cluster nodes."},
	{table: tRedis, name: "password-file", inRedis: func(r *Redis) any { return &r.PasswordFile }, kind: kString, flag: "redis-password-file", help: "A file holding the password (AUTH), read when packetshaper starts."},
	{table: tRedis, name: "timeout", inRedis: func(r *Redis) any { return &r.Timeout }, kind: kDuration, def: DefaultRedisTimeout, help: "Bounds each request to the store (at most 10s); a store slower than that for longer than a short grace is taken as gone."},
	{table: tRedis, name: "refresh-interval", inRedis: func(r *Redis) any { return &r.RefreshInterval }, kind: kDuration, def: DefaultRefreshInterval, help: "How often a host asks for a key above its limit (10ms to 1m): the hosts hold at most rate × max(this, global-slack × 1s) of a key, and a hot key costs about hosts ÷ this asks a second."},
	{table: tRedis, name: "leases", inRedis: func(r *Redis) any { return &r.Leases }, kind: kString, def: DefaultLeases, help: "How global token-bucket rules lease their keys: rate (a share of the rate for a refresh interval and a burst bucket: a hot key costs about hosts ÷ refresh-interval asks a second) or token (tokens from the store's bucket: about max(hosts ÷ refresh-interval, 2 × rate ÷ burst)). Fixed-window rules always lease tokens of their window."},
	{table: tRedis, name: "key-prefix", inRedis: func(r *Redis) any { return &r.KeyPrefix }, kind: kOptString, def: DefaultKeyPrefix, help: "Starts every key packetshaper writes; no \"{\" or \"}\"."},
	{table: tRedis, name: "username", inRedis: func(r *Redis) any { return &r.Username }, kind: kString, help: "The ACL user to AUTH as (with the password); none for the default user."},
	{table: tRedis, name: "tls", inRedis: func(r *Redis) any { return &r.TLS }, kind: kBool, def: false, implicit: true, help: "Every connection to the store uses TLS."},
	{table: tRedis, name: "ca-file", inRedis: func(r *Redis) any { return &r.CAFile }, kind: kString, help: "PEM certificates the server's must chain to (none: the system's)."},
	{table: tRedis, name: "cert-file", inRedis: func(r *Redis) any { return &r.CertFile }, kind: kString, help: "A client certificate (PEM), with key-file."},
	{table: tRedis, name: "key-file", inRedis: func(r *Redis) any { return &r.KeyFile }, kind: kString, help: "The client certificate's key (PEM), with cert-file."},
	{table: tRedis, name: "server-name", inRedis: func(r *Redis) any { return &r.ServerName }, kind: kString, help: "The name the server's certificate must hold (none: the host of each address)."},
}

// fieldsOf indexes schema by table and name.
var fieldsOf = func() [len(tableNames)]map[string]*field {
	var m [len(tableNames)]map[string]*field
	for t := range m {
		m[t] = map[string]*field{}
	}
	for i := range schema {
		f := &schema[i]
		m[f.table][f.name] = f
	}
	return m
}()

// lookup is the field name of table t, or nil.
func lookup(t table, name string) *field { return fieldsOf[t][name] }

// path is the field as errors name it: "pps", "match.src", "redis.addrs".
func (f *field) path() string {
	switch f.table {
	case tMatch:
		return "match." + f.name
	case tRedis:
		return "redis." + f.name
	case tTotal:
		return "total." + f.name
	}
	return f.name
}

// names are the fields of table t, sorted, for did-you-mean.
func names(t table) []string {
	var s []string
	for n := range fieldsOf[t] {
		s = append(s, n)
	}
	sort.Strings(s)
	return s
}

var (
	topLevelNames   = []string{"redis", "rule", "total"}
	totalFieldNames = names(tTotal)
	ruleFieldNames  = names(tRule)
	matchFieldNames = names(tMatch)
	redisFieldNames = names(tRedis)
)

// fieldFor is the field of a rule (given: the limit settings it has) that an
// engine error about settings is reported at: the first setting's field
// that the rule gives, else the rate's (rate: "pps" or "bitrate").
func fieldFor(settings []shaper.Setting, given []string, rate string) string {
	for _, s := range settings {
		for i := range schema {
			f := &schema[i]
			if f.table != tRule || !hasSetting(f, s) {
				continue
			}
			for _, g := range given {
				if g == f.name {
					return g
				}
			}
		}
	}
	return rate
}

func hasSetting(f *field, s shaper.Setting) bool {
	for _, x := range f.settings {
		if x == s {
			return true
		}
	}
	return false
}

// given reports whether the field p points at (from f's inRule, inMatch
// or inRedis) is set (not its zero value).
func (f *field) given(p any) bool { return f.kind.codec().given(p) }

// deflt is f's default: its def, else its kind's (nil: none).
func (f *field) deflt() any {
	if f.def != nil {
		return f.def
	}
	return f.kind.codec().def
}

// defaultDoc is f's default as the reference and the flags' help write
// it ("" for none).
func (f *field) defaultDoc() string {
	if f.deflt() == nil {
		return f.defNote
	}
	return f.kind.codec().show(f.deflt()) + f.defNote
}

// Flag is the command-line flag that sets the field named path ("pps",
// "redis.addrs"), or "" if none does.
func Flag(path string) string {
	for i := range schema {
		if f := &schema[i]; f.path() == path {
			return f.flag
		}
	}
	return ""
}

// KeySetting is one setting of a key configuration that differs from its
// default, in the rule file's words: a field and its value ("" for a
// boolean that is true).
type KeySetting struct{ Field, Value string }

// KeySettings are the settings of k other than its mode that differ from
// their defaults, in the schema's order: mark mask, prefix lengths,
// symmetric.
func KeySettings(k *flows.KeyConfig) []KeySetting {
	r := Rule{SrcPrefix4: &k.SrcPrefix4, DstPrefix4: &k.DstPrefix4, SrcPrefix6: &k.SrcPrefix6, DstPrefix6: &k.DstPrefix6, Symmetric: &k.Symmetric}
	var out []KeySetting
	for i := range schema {
		f := &schema[i]
		if f.table != tRule {
			continue
		}
		switch {
		case hasSetting(f, shaper.SettingMarkMask):
			if k.MarkMask != 0 && k.MarkMask != ^uint32(0) {
				out = append(out, KeySetting{f.name, fmt.Sprintf("%#x", k.MarkMask)})
			}
		case hasSetting(f, shaper.SettingPrefix):
			if v := **f.inRule(&r).(**int); v > 0 && v != f.deflt() {
				out = append(out, KeySetting{f.name, strconv.Itoa(v)})
			}
		case hasSetting(f, shaper.SettingSymmetric):
			if k.Symmetric {
				out = append(out, KeySetting{Field: f.name})
			}
		}
	}
	return out
}

// DescribeKey is a key configuration in the rule file's words: "5tuple",
// "src src-prefix4=24", "src-dst symmetric".
func DescribeKey(k *flows.KeyConfig) string {
	s := k.Mode.String()
	for _, ks := range KeySettings(k) {
		s += " " + ks.Field
		if ks.Value != "" {
			s += "=" + ks.Value
		}
	}
	return s
}
