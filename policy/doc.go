// Package policy reads, checks and compiles packetshaper's rule file: a TOML
// list of [[rule]] tables, tried in order, the first whose match table holds
// for a packet deciding it.
//
//	[[rule]]
//	name   = "mgmt"
//	match  = { src = ["10.9.0.0/16", "fd00:9::/32"], proto = ["tcp"], dport = ["22", "8000-8100"] }
//	action = "accept"
//
//	[[rule]]
//	name  = "dns"
//	match = { proto = ["udp"], dport = ["53"] }
//	key   = "src"
//	src-prefix4 = 24
//	pps   = 10
//	burst = 2
//
// Parse decodes strictly, in one walk over go-toml's AST against the schema
// declared once in schema.go (unknown fields, wrong types and duplicates
// refused), and validates everything; each error is one line naming
// the file, line, column, rule and field (Error). Compile turns a File into
// the engine's shaper.Policy: one shaper.Rule per rule (each limit rule with
// its own flow table) and a Classifier.
//
// # Rules
//
// A rule's action is "limit" (the default), "accept" (never limited) or
// "drop". A limit rule has one rate, pps or bitrate, and the other limiter
// settings (burst, algo, shape, max-delay, window, key, src-prefix4/6,
// dst-prefix4/6, symmetric, max-flows, flow-timeout) mean what the limiter
// flags of the same names mean, with the same defaults and ranges. shape =
// true (or algo = "leaky-bucket") makes a token-bucket rule delay packets
// over the rate, up to max-delay, instead of dropping them. mode = "shadow"
// accepts what the limiter would drop and counts it; on-exceed = "mark"
// accepts it with its mark changed by set-mark ("VALUE/MASK": mark =
// (mark &^ MASK) | VALUE). A packet no rule matches is accepted.
//
// # Global rules
//
// scope = "global" makes a limit rule's budget one per flow key for every
// host that runs it (token-bucket and fixed-window only): the budgets live in
// the store that the top-level [redis] table names, and each host takes them
// in leases (package global). global-slack (default 0.01) is the fraction of
// the rate × 1 s that all hosts together may hold in leases of one key.
//
//	[redis]
//	addrs = ["10.0.0.5:6379"]     # one server or primary; several with cluster = true
//	timeout = "20ms"              # default
//	refresh-interval = "1s"       # default: a hot key costs about hosts ÷ this asks/s
//	key-prefix = "packetshaper:"  # default
//	# password-file = "/etc/packetshaper/redis.pw"
//	# username = "packetshaper"   # an ACL user (see docs/global-limits.md, the ACL)
//	# tls = true                  # default false; the rest needs it:
//	# ca-file = "/etc/packetshaper/redis-ca.pem"    # default: the system's roots
//	# cert-file = "/etc/packetshaper/client.pem"    # a client certificate,
//	# key-file = "/etc/packetshaper/client.key"     #   both or neither
//	# server-name = "redis.example"                 # default: each address's host
//
// The TLS files are read when the file is checked: one missing, unreadable
// or holding the wrong thing is an error at its place.
//
// # Matching
//
// A match table's fields must all hold (AND); a list holds when one of its
// items does (OR). No match table (or an empty one) matches every packet.
//
//   - src, dst: addresses or CIDRs. An IPv4 item never matches an IPv6
//     packet nor the reverse; an address without a length is one host.
//   - family: "ipv4" or "ipv6".
//   - proto: tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254.
//   - sport, dport: ports and "lo-hi" ranges. They hold only for the
//     protocols that have ports (TCP, UDP, UDP-Lite, SCTP): an ICMP echo's
//     identifier, which flows.Packet keeps in its port fields, never
//     matches a port.
//   - iif, oif: interface names, compared with shaper.Meta's InIf and
//     OutIf (interface indexes live; ids from Compiled.IfaceID in replay).
//     A name that does not exist when the file is compiled matches nothing
//     (Compiled.Warnings says so) until a reload.
//   - mark: "VALUE" or "VALUE/MASK": the packet's mark & MASK == VALUE.
//   - queue: NFQUEUE queue numbers.
//   - uid, gid: the owner of the local socket that sent the packet
//     (shaper.Meta's UID and GID), as numbers and "lo-hi" ranges. A packet
//     without an owner (forwarded, incoming, made by the kernel, replayed:
//     HasOwner false) meets neither: it has no id that could be listed.
//     A limit rule keyed by uid or gid (key = "uid", "gid+dst") puts such
//     packets in one flow, "no owner", so that having no owner never
//     escapes a per-owner limit; Compiled.Warnings says both.
//
// No evasion by hiding the transport header: a packet whose ports could not
// be read (flows.Packet.NoPorts: a non-first fragment, a transport header
// cut short, IPv6 extension headers past the copied bytes) has unknown
// ports, and when its protocol could not be found either (ProtoUnknown) an
// unknown protocol. An unknown value meets the rule's constraint on it for
// rules that limit or drop (shadow rules included), and fails it for accept
// rules. So hiding the ports never reaches an allowlist rule and never
// escapes a limit: such packets fall to the limit and drop rules whose
// other fields they match. (Protocol 255, reserved by IANA, is what
// packetshaper calls an unknown protocol; it cannot be listed in proto.)
//
// The classifier is compiled, not a walk over the rules: see classifier.
package policy
