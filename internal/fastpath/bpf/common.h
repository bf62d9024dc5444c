// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Includes, limits, enums and the structs the Go side shares (bpf2go -type).

#ifndef FASTPATH_COMMON_H
#define FASTPATH_COMMON_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_RULES 64
#define MAX_RANGES 4
#define MAX_IFS 4
#define MAX_EXT 32
#define NANO 1000000000ULL

// Actions of a rule entry. PUNT: the rule runs in user space; its packets
// are marked and passed on.
enum action { ACT_ACCEPT = 0, ACT_DROP = 1, ACT_LIMIT = 2, ACT_PUNT = 3 };
// shaper.Algorithm's numbers.
enum algo { ALGO_TB = 0, ALGO_FW = 1, ALGO_SWC = 3 };
// flows.Mode's numbers.
enum key_mode { MODE_5TUPLE = 0, MODE_SRC = 1, MODE_DST = 2, MODE_SRCDST = 3 };
// What happens over the limit.
enum over { OVER_DROP = 0, OVER_SHADOW = 1, OVER_MARK = 2 };

// What a flow's limiter must hold to accept a packet (allow's need), as
// shaper.Need: NEED_ALL its cost (every plain packet); NEED_CAP its cost, or
// the limiter's whole capacity when the cost is more (a GSO/GRO packet,
// whose segments together may exceed the burst: decided at once, accepted
// on a full bucket and its excess charged as debt, never starved);
// NEED_NONE nothing (a later fragment of a datagram the limit accepted at
// its first fragment: charged, as debt if need be); NEED_OVER refused,
// charged nothing (a later fragment of a datagram the limit refused).
enum { NEED_ALL = 0, NEED_CAP = 1, NEED_NONE = 2, NEED_OVER = 3 };
// The most debt a flow's state holds (tokens below zero, a window's count
// over its limit), far beyond any refill that could pay it back: so that
// charges without a check never overflow.
#define DEBT_MAX (1LL << 62)

// Counters: per rule (index = rule), and the program's own at MAX_RULES,
// one lookup per packet: a packet a rule decides is counted in its rule's
// only (the program's own C_PACKETS are the packets no rule decided; Go
// adds the rules' C_PACKETS for every packet's count).
// C_INSERTS: flows a limit rule put in its map (an LRU map reports no
// evictions: inserts less the flows present is an upper bound of them).
enum counter { C_PACKETS, C_ACCEPTED, C_DROPPED, C_SHADOW, C_MARKED, C_PUNTED, C_INSERTS, C_N };

struct rule_entry {
	__u64 proto[4];        // protocols matched, a bit each (all ones: any)
	__u64 burst;           // token bucket capacity, nano-units
	__u64 rate_int;        // rate, nano-units per ns: whole part
	__u64 rate_hi, rate_lo; // and fraction in units of 2^-128
	__s64 window, limit;   // window algorithms
	__s64 timeout;         // flow idle timeout in ns (<= 0: never)
	__u32 mark, mark_mask; // match.mark (has_mark)
	__u32 set_mark, set_mask; // on-exceed = mark
	__u32 iif[MAX_IFS];
	__u16 sport_lo[MAX_RANGES], sport_hi[MAX_RANGES];
	__u16 dport_lo[MAX_RANGES], dport_hi[MAX_RANGES];
	__u8 n_sport, n_dport, n_iif, has_mark;
	__u8 has_proto; // match.proto given
	__u8 family;   // 0 (any), 4 or 6
	__u8 action;   // ACT_*
	__u8 orig;     // the rule's own action (ACT_ACCEPT/DROP/LIMIT), for hidden ports
	__u8 algo;     // ALGO_*
	__u8 mode;     // MODE_*
	__u8 bytes;    // cost is the IP length
	__u8 over;     // OVER_*
	__u8 symmetric;
	__u8 src4, dst4, src6, dst6; // key prefix lengths (full when not masked)
	__u32 total;   // the total it charges: its index in totals, or TOTAL_NONE
	__u8 tbytes;   // the total's cost is the IP length
	__u8 _tpad[3];
};

struct cfg {
	__u64 src_free, dst_free; // rules without a src (dst) constraint
	__u64 now;                // if not 0, the time (tests); else the clock + offset
	__s64 offset;             // Unix time minus boot time, ns
	__u32 nrules;
	__u32 punt_mark;          // the mark bit(s) set on packets for user space
	__u32 lpm;                // LPM_*: the tries that hold prefixes of a family
	__u32 _pad;
};

// cfg.lpm: the address tries worth a lookup for a packet of a family (a
// trie with no prefix of the family gives every packet the rules free of
// that constraint, which the program then takes without the lookup).
enum lpm_flag { LPM_SRC4 = 1, LPM_SRC6 = 2, LPM_DST4 = 4, LPM_DST6 = 8 };

struct lpm_key {
	__u32 prefixlen; // 8 + address bits
	__u8 data[17];   // family (4 or 6), then the address
};

// A flow's key in its rule's maps (each limit rule has its own: the rule
// and its key mode are not in the key), as flows.Key; 40 bytes (a
// multiple of 4: the kernel hashes such a key by words, jhash2, another by
// bytes), and a state of 40: one LRU element of the kernel (its 48-byte
// header, key and value) is 128 bytes, two cache lines.
struct flow_key {
	__u8 src[16], dst[16];
	__u16 sport, dport;
	__u8 proto, family;
	__u8 _pad[2]; // zero
} __attribute__((aligned(8))); // stored and hashed by words, not by halfwords (clang's stores follow the type's alignment)

// A flow's state: what shaper.State holds for the three algorithms (the
// token bucket's tokens and the sliding-window counter's previous count
// share a word: no algorithm uses both), and the table's time, which
// shares its word with the lock (flowstate.h).
struct flow_state {
	__s64 last;   // newest time seen by the limiter
	__u64 seen;   // newest time seen by the table (idle timeout) << LOCK_BITS | the lock (enum lock_state)
	union {
		__s64 tokens; // token bucket, nano-units
		__s64 prev;   // sliding-window counter: previous window's count
	};
	__u64 win;    // window index, or the fraction's high word
	__u64 cur;    // current window's count, or the fraction's low word
};

// A class total (shaper/total.go) of kernel rules: one state for every
// packet of the rules that charge it, under its own lock word (the
// state's), its limiter's parameters in lim (burst, rate, window, limit,
// algo: what allow reads), and its counters, changed under the lock.
#define MAX_TOTALS MAX_RULES
#define TOTAL_NONE 0xffffffffU
struct total {
	struct flow_state st;
	struct rule_entry lim;
	__u64 packets, accepted, dropped;
};

struct rule_counters {
	__u64 c[C_N];
};

// The enums in BTF, for bpf2go's Go constants (the Go side reads the
// numbers from there, never writes them again).
const enum action *unused_action __attribute__((unused));
const enum algo *unused_algo __attribute__((unused));
const enum key_mode *unused_key_mode __attribute__((unused));
const enum over *unused_over __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const enum lpm_flag *unused_lpm_flag __attribute__((unused));

#endif
