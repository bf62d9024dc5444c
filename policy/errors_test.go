package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/timing"
)

// errorCases are rule files Parse must refuse, with the one line it must
// say.
var errorCases = []struct{ name, in, want string }{
	{"unknown top-level field", "colour = 1\n",
		"p.toml:1:1: colour: unknown field (a rule file holds [[rule]] tables, [[total]] tables and a [redis] table)"},
	{"unknown top-level table", "[limits]\npps = 1\n",
		"p.toml:1:2: limits: unknown field (a rule file holds [[rule]] tables, [[total]] tables and a [redis] table)"},
	{"unknown rule field", "[[rule]]\nname = \"a\"\npps = 1\nbrust = 2\n",
		"p.toml:4:1: rule \"a\": brust: unknown field (did you mean \"burst\"?)"},
	{"unknown quoted field", "[[rule]]\nname = \"a\"\npps = 1\n\"x\\ny\" = 2\nmatch.\"a b\" = 1\n",
		"p.toml:4:1: rule \"a\": \"x\\ny\": unknown field"},
	{"unknown quoted top-level field", "\"\" = 1\n",
		"p.toml:1:1: \"\": unknown field (a rule file holds [[rule]] tables, [[total]] tables and a [redis] table)"},
	{"unknown rule field no hint", "[[rule]]\nname = \"a\"\npps = 1\nfrobnicate = 2\n",
		"p.toml:4:1: rule \"a\": frobnicate: unknown field"},
	{"unknown match field", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { srcs = [\"10.0.0.0/8\"] }\n",
		"p.toml:4:11: rule \"a\": match.srcs: unknown field (did you mean \"src\"?)"},
	{"unknown match field in table", "[[rule]]\nname = \"a\"\npps = 1\n[rule.match]\nsrc = [\"10.0.0.0/8\"]\nports = [\"1\"]\n",
		"p.toml:6:1: rule \"a\": match.ports: unknown field (did you mean \"dport\"?)"},
	{"unknown match field dotted", "[[rule]]\nname = \"a\"\npps = 1\nmatch.dprt = [\"1\"]\n",
		"p.toml:4:7: rule \"a\": match.dprt: unknown field (did you mean \"dport\"?)"},
	{"bad CIDR", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { src = [\"10.0.0.0/8\", \"10.0.0.300/8\"] }\n",
		"p.toml:4:32: rule \"a\": match.src: bad CIDR \"10.0.0.300/8\" (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")"},
	{"bad address", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { dst = [\"10.0.0\"] }\n",
		"p.toml:4:18: rule \"a\": match.dst: bad address \"10.0.0\" (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")"},
	{"CIDR host bits", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { src = [\"fd00:9::1/32\"] }\n",
		"p.toml:4:18: rule \"a\": match.src: bad CIDR \"fd00:9::1/32\": bits set past /32 (did you mean \"fd00:9::/32\"?)"},
	{"CIDR length", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { src = [\"10.0.0.0/33\"] }\n",
		"p.toml:4:18: rule \"a\": match.src: bad CIDR \"10.0.0.0/33\" (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")"},
	{"zone", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { src = [\"fe80::1%eth0\"] }\n",
		"p.toml:4:18: rule \"a\": match.src: bad address \"fe80::1%eth0\" (want an address or CIDR such as \"10.1.0.0/16\" or \"fd00::/8\")"},
	{"port too large", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { dport = [\"22\", \"70000\"] }\n",
		"p.toml:4:26: rule \"a\": match.dport: bad port \"70000\" (want a port 0-65535 or a range such as \"8000-8100\")"},
	{"port range reversed", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { sport = [\"8100-8000\"] }\n",
		"p.toml:4:20: rule \"a\": match.sport: bad port range \"8100-8000\": 8100 is above 8000"},
	{"port range too large", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { dport = [\"1-65536\"] }\n",
		"p.toml:4:20: rule \"a\": match.dport: bad port \"1-65536\" (want a port 0-65535 or a range such as \"8000-8100\")"},
	{"port not a number", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { dport = [\"ssh\"] }\n",
		"p.toml:4:20: rule \"a\": match.dport: bad port \"ssh\" (want a port 0-65535 or a range such as \"8000-8100\")"},
	{"port negative integer", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { dport = [-5] }\n",
		"p.toml:4:20: rule \"a\": match.dport: bad port \"-5\" (want a port 0-65535 or a range such as \"8000-8100\")"},
	{"duplicate name", "[[rule]]\nname = \"a\"\npps = 1\n\n[[rule]]\nname = \"a\"\npps = 2\n",
		"p.toml:6:8: rule \"a\": name: \"a\" is already the name of rule #1 (line 2)"},
	{"bad name", "[[rule]]\nname = \"web trial\"\npps = 1\n",
		"p.toml:2:8: rule \"web trial\": name: \"web trial\" is not a valid name: use letters, digits, \"_\", \".\" and \"-\""},
	{"missing name", "[[rule]]\npps = 1\n",
		"p.toml:1:1: rule #1: name: missing: every rule needs a unique name"},
	{"rate on accept", "[[rule]]\nname = \"a\"\naction = \"accept\"\npps = 1\n",
		"p.toml:4:7: rule \"a\": pps: not allowed on an accept rule: only limit rules take it"},
	{"rate on drop", "[[rule]]\nname = \"a\"\nbitrate = \"1mbit\"\naction = \"drop\"\n",
		"p.toml:3:11: rule \"a\": bitrate: not allowed on a drop rule: only limit rules take it"},
	{"no rate", "[[rule]]\nname = \"a\"\n",
		"p.toml:1:1: rule \"a\": no limit given: set pps or bitrate (or action = \"accept\" or \"drop\")"},
	{"no rate on limit", "[[rule]]\nname = \"a\"\naction = \"limit\"\n",
		"p.toml:3:10: rule \"a\": action: no limit given: set pps or bitrate (or action = \"accept\" or \"drop\")"},
	{"pps and bitrate", "[[rule]]\nname = \"a\"\npps = 1\nbitrate = \"1mbit\"\n",
		"p.toml:4:11: rule \"a\": bitrate: pps and bitrate are exclusive: give one"},
	{"bitrate and pps", "[[rule]]\nname = \"a\"\nbitrate = \"1mbit\"\npps = 1\n",
		"p.toml:4:7: rule \"a\": pps: pps and bitrate are exclusive: give one"},
	{"set-mark without mark", "[[rule]]\nname = \"a\"\npps = 1\nset-mark = \"0x1\"\n",
		"p.toml:4:12: rule \"a\": set-mark: needs on-exceed = \"mark\""},
	{"mark without set-mark", "[[rule]]\nname = \"a\"\npps = 1\non-exceed = \"mark\"\n",
		"p.toml:4:13: rule \"a\": on-exceed: \"mark\" needs set-mark (such as set-mark = \"0x1/0x1\")"},
	{"no-owner without an owner key", "[[rule]]\nname = \"a\"\npps = 1\nno-owner = \"accept\"\n",
		"p.toml:4:12: rule \"a\": no-owner: needs a uid or gid key (key = \"uid\", \"gid\", or one of them joined to src, dst or src-dst), not key = \"5tuple\""},
	{"bad no-owner", "[[rule]]\nname = \"a\"\npps = 1\nkey = \"uid\"\nno-owner = \"drop\"\n",
		"p.toml:5:12: rule \"a\": no-owner: unknown value \"drop\" (want accept-replies, limit, accept, key-by-dst)"},
	{"bad on-exceed", "[[rule]]\nname = \"a\"\npps = 1\non-exceed = \"reject\"\n",
		"p.toml:4:13: rule \"a\": on-exceed: unknown value \"reject\" (want drop or mark)"},
	{"mode on accept", "[[rule]]\nname = \"a\"\naction = \"accept\"\nmode = \"shadow\"\n",
		"p.toml:4:8: rule \"a\": mode: not allowed on an accept rule: only limit rules take it"},
	{"mode on drop", "[[rule]]\nname = \"a\"\naction = \"drop\"\nmode = \"enforce\"\n",
		"p.toml:4:8: rule \"a\": mode: not allowed on a drop rule: only limit rules take it"},
	{"bad mode", "[[rule]]\nname = \"a\"\npps = 1\nmode = \"dry-run\"\n",
		"p.toml:4:8: rule \"a\": mode: unknown mode \"dry-run\" (want enforce or shadow)"},
	{"bad action", "[[rule]]\nname = \"a\"\npps = 1\naction = \"allow\"\n",
		"p.toml:4:10: rule \"a\": action: unknown action \"allow\" (want limit, accept or drop)"},
	{"bad match mark", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { mark = \"0xzz\" }\n",
		"p.toml:4:18: rule \"a\": match.mark: bad mark \"0xzz\": want VALUE or VALUE/MASK, numbers up to 0xffffffff (such as \"0x10/0xff\")"},
	{"match mark outside mask", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { mark = \"0x3/0x1\" }\n",
		"p.toml:4:18: rule \"a\": match.mark: bad mark \"0x3/0x1\": value 0x3 has bits outside mask 0x1"},
	{"bad set-mark", "[[rule]]\nname = \"a\"\npps = 1\non-exceed = \"mark\"\nset-mark = \"0x100000000\"\n",
		"p.toml:5:12: rule \"a\": set-mark: bad mark \"0x100000000\": want VALUE or VALUE/MASK, numbers up to 0xffffffff (such as \"0x10/0xff\")"},
	{"set-mark mask 0", "[[rule]]\nname = \"a\"\npps = 1\non-exceed = \"mark\"\nset-mark = \"0/0\"\n",
		"p.toml:5:12: rule \"a\": set-mark: bad mark \"0/0\": a mask of 0 takes no bit of the mark"},
	{"bad family", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { family = \"ip4\" }\n",
		"p.toml:4:20: rule \"a\": match.family: unknown family \"ip4\" (want ipv4 or ipv6)"},
	{"family and addresses", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { family = \"ipv6\", src = [\"10.0.0.0/8\"] }\n",
		"p.toml:4:28: rule \"a\": match.src: never matches: no item is an IPv6 address or CIDR, and match.family is \"ipv6\""},
	{"bad proto", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { proto = [\"tcp\", \"tpc\"] }\n",
		"p.toml:4:27: rule \"a\": match.proto: unknown protocol \"tpc\" (want tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254)"},
	{"proto number too large", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { proto = [256] }\n",
		"p.toml:4:20: rule \"a\": match.proto: unknown protocol \"256\" (want tcp, udp, icmp, icmpv6, sctp, udplite or a number 0-254)"},
	{"proto 255", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { proto = [\"255\"] }\n",
		"p.toml:4:20: rule \"a\": match.proto: protocol 255 is reserved: packetshaper means by it a protocol it could not find (want 0-254)"},
	{"ports without port protocol", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { proto = [\"icmp\"], dport = [\"1\"] }\n",
		"p.toml:4:29: rule \"a\": match.dport: never matches: no protocol in match.proto has ports (tcp, udp, udplite, sctp)"},
	{"bad duration", "[[rule]]\nname = \"a\"\npps = 1\nwindow = \"1x\"\n",
		"p.toml:4:10: rule \"a\": window: bad duration \"1x\": want a number with a unit, such as \"1s\" or \"500ms\""},
	{"zero duration", "[[rule]]\nname = \"a\"\npps = 1\nwindow = \"0s\"\n",
		"p.toml:4:10: rule \"a\": window: must be positive, not 0s"},
	{"negative flow-timeout", "[[rule]]\nname = \"a\"\npps = 1\nflow-timeout = \"-1s\"\n",
		"p.toml:4:16: rule \"a\": flow-timeout: must be positive, not -1s"},
	{"bad algo", "[[rule]]\nname = \"a\"\npps = 1\nalgo = \"leaky\"\n",
		"p.toml:4:8: rule \"a\": algo: unknown algorithm \"leaky\" (want token-bucket, leaky-bucket, fixed-window, sliding-window or sliding-window-counter)"},
	{"shape not a bool", "[[rule]]\nname = \"a\"\npps = 1\nshape = \"yes\"\n",
		"p.toml:4:9: rule \"a\": shape: want true or false, not a string"},
	{"max-delay not a duration", "[[rule]]\nname = \"a\"\npps = 1\nshape = true\nmax-delay = \"50\"\n",
		"p.toml:5:13: rule \"a\": max-delay: bad duration \"50\": want a number with a unit, such as \"1s\" or \"500ms\""},
	{"max-delay zero", "[[rule]]\nname = \"a\"\npps = 1\nshape = true\nmax-delay = \"0s\"\n",
		"p.toml:5:13: rule \"a\": max-delay: must be positive, not 0s"},
	{"max-delay too long", "[[rule]]\nname = \"a\"\npps = 1\nshape = true\nmax-delay = \"11s\"\n",
		"p.toml:5:13: rule \"a\": max-delay: must be at most 10s, not 11s"},
	{"max-delay without shape", "[[rule]]\nname = \"a\"\npps = 1\nmax-delay = \"50ms\"\n",
		"p.toml:4:13: rule \"a\": max-delay: needs shape = true (or algo = \"leaky-bucket\")"},
	{"max-delay with shape false", "[[rule]]\nname = \"a\"\npps = 1\nshape = false\nmax-delay = \"50ms\"\n",
		"p.toml:5:13: rule \"a\": max-delay: needs shape = true (or algo = \"leaky-bucket\")"},
	{"shape with a window algorithm", "[[rule]]\nname = \"a\"\npps = 1\nalgo = \"fixed-window\"\nshape = true\n",
		"p.toml:5:9: rule \"a\": shape: only the token bucket shapes (algo \"token-bucket\" or \"leaky-bucket\"), not fixed-window"},
	{"leaky-bucket not shaping", "[[rule]]\nname = \"a\"\npps = 1\nalgo = \"leaky-bucket\"\nshape = false\n",
		"p.toml:5:9: rule \"a\": shape: algo \"leaky-bucket\" always shapes: leave shape out or set it to true (algo \"token-bucket\" polices)"},
	{"shape in shadow mode", "[[rule]]\nname = \"a\"\npps = 1\nmode = \"shadow\"\nshape = true\n",
		"p.toml:5:9: rule \"a\": shape: a shaping rule cannot be a shadow rule (mode = \"shadow\"): it holds packets, which a dry run must not"},
	{"leaky-bucket marking", "[[rule]]\nname = \"a\"\npps = 1\nalgo = \"leaky-bucket\"\non-exceed = \"mark\"\nset-mark = \"1\"\n",
		"p.toml:4:8: rule \"a\": algo: a shaping rule delays what exceeds the rate and drops only what overflows its queue: on-exceed = \"mark\" does not apply"},
	{"shape on an accept rule", "[[rule]]\nname = \"a\"\naction = \"accept\"\nshape = true\n",
		"p.toml:4:9: rule \"a\": shape: not allowed on an accept rule: only limit rules take it"},
	{"shape queue too big", "[[rule]]\nname = \"a\"\nbitrate = \"1tbit\"\nburst = 1e9\nshape = true\nmax-delay = \"10s\"\n",
		"p.toml:6:13: rule \"a\": max-delay: rate × max delay is 1.25e+12, a queue above 1e+09: lower the max delay"},
	{"flow timeout below max delay", "[[rule]]\nname = \"a\"\npps = 1\nshape = true\nmax-delay = \"2s\"\nflow-timeout = \"1s\"\n",
		"p.toml:6:16: rule \"a\": flow-timeout: a flow timeout of 1s is below the max delay of 2s: a flow could be forgotten while its packets are held"},
	{"bad key", "[[rule]]\nname = \"a\"\npps = 1\nkey = \"5-tuple\"\n",
		"p.toml:4:7: rule \"a\": key: unknown key mode \"5-tuple\" (want 5tuple, src, dst or src-dst; uid, gid or mark; or one of these joined to src, dst or src-dst, as \"uid+dst\")"},
	{"prefix4 out of range", "[[rule]]\nname = \"a\"\npps = 1\nsrc-prefix4 = 33\n",
		"p.toml:4:15: rule \"a\": src-prefix4: must be between 1 and 32, not 33"},
	{"prefix6 out of range", "[[rule]]\nname = \"a\"\npps = 1\ndst-prefix6 = 0\n",
		"p.toml:4:15: rule \"a\": dst-prefix6: must be between 1 and 128, not 0"},
	{"symmetric unequal", "[[rule]]\nname = \"a\"\npps = 1\nsrc-prefix4 = 24\nsymmetric = true\n",
		"p.toml:5:13: rule \"a\": symmetric: symmetric keys need equal source and destination prefix lengths (IPv4 /24 and /32, IPv6 /128 and /128)"},
	{"sliding-window bitrate", "[[rule]]\nname = \"a\"\nbitrate = \"10mbit\"\nalgo = \"sliding-window\"\n",
		"p.toml:4:8: rule \"a\": algo: sliding-window counts packets; with a bit rate use sliding-window-counter, fixed-window or token-bucket"},
	{"window too short", "[[rule]]\nname = \"a\"\npps = 0.5\nalgo = \"fixed-window\"\nwindow = \"1s\"\n",
		"p.toml:5:10: rule \"a\": window: rate 0.5/s over a 1 s window allows less than one packet per window; raise the rate or the window"},
	{"byte burst too small", "[[rule]]\nname = \"a\"\nbitrate = \"1mbit\"\nburst = 1000\n",
		"p.toml:4:9: rule \"a\": burst: a burst of 1000 bytes is below one full-size packet (1500 bytes): larger packets could never pass"},
	{"sliding-window logs too large", "[[rule]]\nname = \"a\"\npps = 60000\nalgo = \"sliding-window\"\nmax-flows = 10000000\n",
		"p.toml:5:13: rule \"a\": max-flows: sliding-window keeps 60000 timestamps (8 bytes each) for each of up to 10000000 flows: 4470.3 GiB, over the 2 GiB cap; lower max flows or the limit, or use sliding-window-counter"},
	{"burst below 1", "[[rule]]\nname = \"a\"\npps = 1\nburst = 0.5\n",
		"p.toml:4:9: rule \"a\": burst: must be at least 1, not 0.5"},
	{"burst too large", "[[rule]]\nname = \"a\"\npps = 1\nburst = 2e9\n",
		"p.toml:4:9: rule \"a\": burst: must be at most 1e+09, not 2e+09"},
	{"pps negative", "[[rule]]\nname = \"a\"\npps = -1\n",
		"p.toml:3:7: rule \"a\": pps: is negative (-1): a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	{"pps nan", "[[rule]]\nname = \"a\"\npps = nan\n",
		"p.toml:3:7: rule \"a\": pps: must be a positive number, not NaN"},
	{"pps inf", "[[rule]]\nname = \"a\"\npps = inf\n",
		"p.toml:3:7: rule \"a\": pps: must be a positive number, not +Inf"},
	{"bitrate negative", "[[rule]]\nname = \"a\"\nbitrate = \"-10mbit\"\n",
		"p.toml:3:11: rule \"a\": bitrate: rate \"-10mbit\" is negative: a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	{"bitrate zero", "[[rule]]\nname = \"a\"\nbitrate = \"0kbit\"\n",
		"p.toml:3:11: rule \"a\": bitrate: rate \"0kbit\" is zero: a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	{"bitrate too large", "[[rule]]\nname = \"a\"\nbitrate = \"9pbit\"\n",
		"p.toml:3:11: rule \"a\": bitrate: bad rate unit \"pbit\" in \"9pbit\" (want bit, kbit, mbit, gbit, tbit, kibit, mibit, gibit, tibit, bps, kbps, mbps, gbps, tbps)"},
	{"bitrate over 8pbit", "[[rule]]\nname = \"a\"\nbitrate = \"9000tbit\"\n",
		"p.toml:3:11: rule \"a\": bitrate: rate \"9000tbit\" out of range: at most 8pbit (1e15 bytes per second)"},
	{"bad bitrate", "[[rule]]\nname = \"a\"\nbitrate = \"2 furlongs\"\n",
		"p.toml:3:11: rule \"a\": bitrate: bad rate \"2 furlongs\" (want a number with a unit such as 500kbit, 10mbit or 1gbit)"},
	{"max-flows 0", "[[rule]]\nname = \"a\"\npps = 1\nmax-flows = 0\n",
		"p.toml:4:13: rule \"a\": max-flows: must be at least 1, not 0"},
	{"empty string", "[[rule]]\nname = \"a\"\npps = 1\nkey = \"\"\n",
		"p.toml:4:7: rule \"a\": key: must not be empty"},
	{"bad iif", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { iif = [\"eth0\", \"a/b\"] }\n",
		"p.toml:4:26: rule \"a\": match.iif: bad interface name \"a/b\""},
	{"queue out of range", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { queue = [0, 65536] }\n",
		"p.toml:4:23: rule \"a\": match.queue: queue 65536 out of range 0-65535"},
	{"empty list", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { src = [] }\n",
		"p.toml:4:11: rule \"a\": match.src: empty list: it would match nothing; give at least one item or leave it out"},
	{"empty file", "",
		"p.toml: no rules: a rule file needs at least one [[rule]]"},
	{"comments only", "# nothing\n",
		"p.toml: no rules: a rule file needs at least one [[rule]]"},
	{"wrong type pps", "[[rule]]\nname = \"a\"\npps = \"10\"\n",
		"p.toml:3:7: rule \"a\": pps: want a number, not a string"},
	{"wrong type name", "[[rule]]\nname = 1\npps = 10\n",
		"p.toml:2:8: rule #1: name: want a string, not an integer"},
	{"wrong type symmetric", "[[rule]]\nname = \"a\"\npps = 10\nsymmetric = \"yes\"\n",
		"p.toml:4:13: rule \"a\": symmetric: want true or false, not a string"},
	{"wrong type prefix", "[[rule]]\nname = \"a\"\npps = 10\nsrc-prefix4 = 24.0\n",
		"p.toml:4:15: rule \"a\": src-prefix4: want an integer, not a float"},
	{"wrong type match", "[[rule]]\nname = \"a\"\npps = 10\nmatch = \"udp\"\n",
		"p.toml:4:9: rule \"a\": match: want a table, not a string"},
	{"wrong type list", "[[rule]]\nname = \"a\"\npps = 10\nmatch = { src = \"10.0.0.0/8\" }\n",
		"p.toml:4:17: rule \"a\": match.src: want a list of strings, not a string"},
	{"wrong type item", "[[rule]]\nname = \"a\"\npps = 10\nmatch = { proto = [\"tcp\", 1.5] }\n",
		"p.toml:4:27: rule \"a\": match.proto: want a list of strings or integers: item 2 is a float"},
	{"wrong type queue item", "[[rule]]\nname = \"a\"\npps = 10\nmatch = { queue = [\"1\"] }\n",
		"p.toml:4:20: rule \"a\": match.queue: want a list of integers: item 1 is a string"},
	{"integer overflow", "[[rule]]\nname = \"a\"\npps = 10\nmax-flows = 99999999999999999999\n",
		"p.toml:4:13: rule \"a\": max-flows: decimal number is too large to fit in a 64-bit signed integer"},
	{"syntax unclosed string", "[[rule]]\nname = \"a\npps = 10\n",
		"p.toml:2:10: syntax error: basic strings cannot have new lines"},
	{"syntax bad header", "[[rule]\nname = \"a\"\n",
		"p.toml:1:7: syntax error: expected ']]' to close array table name"},
	{"syntax missing value", "[[rule]]\nname = \"a\"\npps =\n",
		"p.toml:3:6: syntax error: unexpected character U+000A at start of value"},
	{"duplicate key", "[[rule]]\nname = \"a\"\npps = 1\npps = 2\n",
		"p.toml:4:1: rule \"a\": pps: defined twice (first on line 3)"},
	{"rule as table", "[rule]\nname = \"a\"\npps = 1\n",
		"p.toml:1:2: rule: write [[rule]] for each rule, not [rule]"},
	{"rule match as array", "[[rule]]\nname = \"a\"\npps = 1\n[[rule.match]]\nsrc = [\"10.0.0.0/8\"]\n",
		"p.toml:4:8: rule \"a\": match: write [rule.match] or match = { ... }, not [[rule.match]]"},
	{"match twice", "[[rule]]\nname = \"a\"\npps = 1\nmatch = { proto = [\"tcp\"] }\n[rule.match]\nsrc = [\"10.0.0.0/8\"]\n",
		"p.toml:5:7: rule \"a\": match: defined twice (first on line 4)"},
	{"rule match before rule", "[rule.match]\nsrc = [\"10.0.0.0/8\"]\n",
		"p.toml:1:2: [rule.match] before any [[rule]]"},
	{"rule list then table", "rule = [{ name = \"a\", pps = 1 }]\n[rule.match]\nsrc = [\"10.0.0.0/8\"]\n",
		"p.toml:2:2: [rule.match]: rules written as rule = [ ... ] cannot be extended by tables"},
	{"rule not a table list", "rule = [1]\n",
		"p.toml:1:9: rule: want tables ([[rule]] or { ... }), not an integer"},
	{"second rule error", "[[rule]]\nname = \"a\"\npps = 1\n\n[[rule]]\nname = \"b\"\npps = 1\nwindow = \"x\"\n",
		"p.toml:8:10: rule \"b\": window: bad duration \"x\": want a number with a unit, such as \"1s\" or \"500ms\""},
	{"earliest error first", "[[rule]]\nname = \"a\"\npps = -1\n\n[[rule]]\nname = \"b\"\npps = 1\nwindow = \"x\"\n",
		"p.toml:3:7: rule \"a\": pps: is negative (-1): a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	{"error before name", "[[rule]]\npps = -1\nname = \"late\"\n",
		"p.toml:2:7: rule \"late\": pps: is negative (-1): a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	{"inline rules", "rule = [{ name = \"a\", pps = 1 }, { name = \"b\", pps = 0 }]\n",
		"p.toml:1:54: rule \"b\": pps: is zero: a rate is above zero (to drop every packet, a rule with action = \"drop\")"},
	// Global rules and the [redis] table.
	{"unknown scope", "[[rule]]\nname = \"a\"\npps = 1\nscope = \"world\"\n",
		"p.toml:4:9: rule \"a\": scope: unknown scope \"world\" (want local or global)"},
	{"global without redis", "[[rule]]\nname = \"a\"\npps = 1\nscope = \"global\"\n",
		"p.toml:4:9: rule \"a\": scope: \"global\" needs the [redis] table: the addrs of the store the hosts share"},
	{"global sliding window", "[redis]\naddrs = [\"r:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\nscope = \"global\"\nalgo = \"sliding-window\"\n",
		"p.toml:7:8: rule \"a\": algo: a global rule is token-bucket or fixed-window, not \"sliding-window\""},
	{"global shaping", "[redis]\naddrs = [\"r:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\nscope = \"global\"\nshape = true\n",
		"p.toml:7:9: rule \"a\": shape: a global rule does not shape: its budget comes from the store in leases, not as a departure time per packet (shape locally, or police globally)"},
	{"global leaky bucket", "[redis]\naddrs = [\"r:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\nscope = \"global\"\nalgo = \"leaky-bucket\"\n",
		"p.toml:7:8: rule \"a\": algo: a global rule is token-bucket or fixed-window, not \"leaky-bucket\""},
	{"global slack on local", "[[rule]]\nname = \"a\"\npps = 1\nglobal-slack = 0.1\n",
		"p.toml:4:16: rule \"a\": global-slack: only for global rules (scope = \"global\")"},
	{"global slack range", "[redis]\naddrs = [\"r:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\nscope = \"global\"\nglobal-slack = 0\n",
		"p.toml:7:16: rule \"a\": global-slack: must be more than 0 and at most 1 (a fraction of the rate × 1 s), not 0"},
	{"global slack type", "[[rule]]\nname = \"a\"\npps = 1\nglobal-slack = \"1%\"\n",
		"p.toml:4:16: rule \"a\": global-slack: want a number, not a string"},
	{"scope on accept", "[[rule]]\nname = \"a\"\naction = \"accept\"\nscope = \"global\"\n",
		"p.toml:4:9: rule \"a\": scope: not allowed on an accept rule: only limit rules take it"},
	{"redis unknown field", "[redis]\naddr = [\"r:6379\"]\n",
		"p.toml:2:1: redis.addr: unknown field (did you mean \"addrs\"?)"},
	{"redis twice", "[redis]\naddrs = [\"r:6379\"]\n[redis]\n",
		"p.toml:3:2: redis: defined twice (first on line 1)"},
	{"redis array table", "[[redis]]\naddrs = [\"r:6379\"]\n",
		"p.toml:1:3: redis: write [redis], not [[redis]]: there is one store"},
	{"redis not a table", "redis = \"r:6379\"\n",
		"p.toml:1:9: redis: want a table, not a string"},
	{"redis sub-table", "[redis.addrs]\n",
		"p.toml:1:8: redis.addrs: not a table"},
	{"redis addrs type", "redis = { addrs = \"r:6379\" }\n",
		"p.toml:1:19: redis.addrs: want a list of strings, not a string"},
	{"redis addrs missing", "[redis]\ntimeout = \"5ms\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:1:1: redis.addrs: missing: give the store's host:port (several with cluster = true)"},
	{"redis bad addr", "[redis]\naddrs = [\"r:6379\", \"r\"]\ncluster = true\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:2:20: redis.addrs: bad address \"r\" (want host:port, such as \"10.0.0.5:6379\" or \"[fd00::5]:6379\")"},
	{"redis several without cluster", "[redis]\naddrs = [\"a:6379\", \"b:6379\"]\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:2:1: redis.addrs: 2 addresses need cluster = true (Redis Cluster); a single server or a primary takes one"},
	{"redis timeout", "redis.addrs = [\"r:6379\"]\nredis.timeout = \"0s\"\n",
		"p.toml:2:17: redis.timeout: must be positive, not 0s"},
	{"redis timeout too long", "[redis]\naddrs = [\"r:6379\"]\ntimeout = \"1m\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:3:11: redis.timeout: must be at most 10s, not 1m0s"},
	{"redis refresh interval too short", "[redis]\naddrs = [\"r:6379\"]\nrefresh-interval = \"5ms\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:3:20: redis.refresh-interval: must be from 10ms to 1m, not 5ms"},
	{"redis leases unknown", "[redis]\naddrs = [\"r:6379\"]\nleases = \"tokens\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:3:10: redis.leases: must be rate or token, not \"tokens\""},
	{"redis refresh interval too long", "[redis]\naddrs = [\"r:6379\"]\nrefresh-interval = \"2m\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:3:20: redis.refresh-interval: must be from 10ms to 1m, not 2m0s"},
	{"redis key prefix braces", "[redis]\naddrs = [\"r:6379\"]\nkey-prefix = \"ps{x}\"\n[[rule]]\nname = \"a\"\npps = 1\n",
		"p.toml:3:14: redis.key-prefix: must not hold \"{\" or \"}\": each key's hash tag is in braces"},
	{"redis empty password file", "[redis]\naddrs = [\"r:6379\"]\npassword-file = \"\"\n",
		"p.toml:3:17: redis.password-file: must not be empty"},
	{"redis dotted then table", "redis.addrs = [\"r:6379\"]\n[redis]\ncluster = true\n",
		"p.toml:2:2: redis: defined twice (first on line 1)"},
}

func TestParseErrors(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse("p.toml", []byte(c.in))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", f.Rules)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is a %T, not *Error: %v", err, err)
			}
			if got := err.Error(); got != c.want {
				t.Errorf("Parse:\n got %s\nwant %s", got, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is more than one line: %q", err)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	var b strings.Builder
	for i := range 4097 {
		b.WriteString("[[rule]]\nname = \"r" + strconv.Itoa(i+1) + "\"\npps = 1\n")
	}
	_, err := Parse("p.toml", []byte(b.String()))
	if want := "p.toml:12289:1: rule \"r4097\": too many rules: 4097, at most 4096"; err == nil || err.Error() != want {
		t.Errorf("4097 rules:\n got %v\nwant %s", err, want)
	}

	big := make([]byte, MaxFileSize+1)
	for i := range big {
		big[i] = '\n'
	}
	_, err = Parse("p.toml", big)
	if want := "p.toml: file too large: more than 16777216 bytes (16 MiB)"; err == nil || err.Error() != want {
		t.Errorf("large file:\n got %v\nwant %s", err, want)
	}
	path := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if want := path + ": file too large: more than 16777216 bytes (16 MiB)"; err == nil || err.Error() != want {
		t.Errorf("Load large file:\n got %v\nwant %s", err, want)
	}
}

func TestLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.toml")
	_, err := Load(missing)
	if want := missing + ": cannot open: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("Load(missing):\n got %v\nwant %s", err, want)
	}
	f, err := Load("testdata/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "testdata/example.toml" || len(f.Rules) != 4 {
		t.Errorf("Load(example): %q, %d rules", f.Name, len(f.Rules))
	}
}

// A File built in code, as the command line's flags make one: errors name
// the field, without a place.
func TestValidateInCode(t *testing.T) {
	pps, half, zero, big := 10.0, 0.5, 0, 33
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Name: "default", PPS: &pps}, ""},
		{Rule{Name: "default", PPS: &pps, Burst: &half}, "flags: rule \"default\": burst: must be at least 1, not 0.5"},
		{Rule{Name: "default"}, "flags: rule \"default\": no limit given: set pps or bitrate (or action = \"accept\" or \"drop\")"},
		{Rule{Name: "default", PPS: &pps, Bitrate: "1mbit"}, "flags: rule \"default\": bitrate: pps and bitrate are exclusive: give one"},
		{Rule{Name: "default", PPS: &pps, MaxFlows: &zero}, "flags: rule \"default\": max-flows: must be at least 1, not 0"},
		{Rule{Name: "default", PPS: &pps, SrcPrefix4: &big}, "flags: rule \"default\": src-prefix4: must be between 1 and 32, not 33"},
		{Rule{Name: "default", PPS: &pps, Window: -1}, "flags: rule \"default\": window: must be positive, not -1ns"},
		{Rule{Name: "default", Bitrate: "1mbit", Algo: "sliding-window"}, "flags: rule \"default\": algo: sliding-window counts packets; with a bit rate use sliding-window-counter, fixed-window or token-bucket"},
	} {
		f := &File{Name: "flags", Rules: []Rule{c.r}}
		err := f.Validate()
		got := ""
		if err != nil {
			got = err.Error()
			var e *Error
			if !errors.As(err, &e) || e.Line != 0 || (e.Field == "" && strings.Contains(c.want, ": burst:")) {
				t.Errorf("%v: %#v", err, err)
			}
		}
		if got != c.want {
			t.Errorf("Validate(%+v):\n got %s\nwant %s", c.r, got, c.want)
		}
	}
	f := &File{Name: "flags", Rules: []Rule{{Name: "default", PPS: &pps, Burst: &half}}}
	var e *Error
	if !errors.As(f.Validate(), &e) || e.Field != "burst" || e.Msg != "must be at least 1, not 0.5" {
		t.Errorf("Validate: %#v", e)
	}
}

// TestMatchBytesCap: a file whose match tables would compile to more than
// MaxMatchBytes is refused at once, in one line, before compiling.
func TestMatchBytesCap(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 4000; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nmatch = { dport = [", i)
		for j := 0; j < 60; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%d", 1000+j)
		}
		b.WriteString("], proto = [\"udp\"] }\npps = 10\n\n")
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	_, err := Parse("big.toml", []byte(b.String()))
	d := time.Since(t0)
	runtime.ReadMemStats(&m1)
	if err == nil || !strings.Contains(err.Error(), "MiB compiled") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Parse of 4000 rules × 60 ports: %v", err)
	}
	// Before compiling: the tables refused would have taken over 100 MiB;
	// refusing allocates less than the cap.
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("refused in %v, %d MiB allocated", d, alloc>>20)
	if alloc > MaxMatchBytes {
		t.Errorf("refusing allocated %d MiB, more than the %d MiB cap: the tables were compiled", alloc>>20, MaxMatchBytes>>20)
	}
	timing.Check(t, d <= 20*time.Second, "refusing took %v, want at most 20 s", d)
}
