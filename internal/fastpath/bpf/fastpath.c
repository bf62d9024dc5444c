// SPDX-License-Identifier: (MIT OR GPL-2.0)
// The fast path: a tc (tcx) classifier that decides in the kernel the rules
// of a policy the kernel can enforce, with the same rule order, first-match
// semantics and integer arithmetic as package shaper, and marks the rest for
// the NFQUEUE divert rule (see ../doc.go).

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
enum { ACT_ACCEPT = 0, ACT_DROP = 1, ACT_LIMIT = 2, ACT_PUNT = 3 };
// shaper.Algorithm's numbers.
enum { ALGO_TB = 0, ALGO_FW = 1, ALGO_SWC = 3 };
// flows.Mode's numbers.
enum { MODE_5TUPLE = 0, MODE_SRC = 1, MODE_DST = 2, MODE_SRCDST = 3 };
// What happens over the limit.
enum { OVER_DROP = 0, OVER_SHADOW = 1, OVER_MARK = 2 };

// Counters: per rule (index = rule), and the program's own at MAX_RULES.
// C_INSERTS: flows a limit rule put in its map (an LRU map reports no
// evictions: inserts less the flows present is an upper bound of them).
enum { C_PACKETS, C_ACCEPTED, C_DROPPED, C_SHADOW, C_MARKED, C_PUNTED, C_INSERTS, C_N };

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
	__u32 id;      // the rule's identity in flow keys
};

struct cfg {
	__u64 src_free, dst_free; // rules without a src (dst) constraint
	__u64 now;                // if not 0, the time (tests); else the clock + offset
	__s64 offset;             // Unix time minus boot time, ns
	__u32 nrules;
	__u32 punt_mark;          // the mark bit(s) set on packets for user space
};

struct lpm_key {
	__u32 prefixlen; // 8 + address bits
	__u8 data[17];   // family (4 or 6), then the address
};

struct flow_key {
	__u8 src[16], dst[16];
	__u16 sport, dport;
	__u8 proto, family, mode, _pad;
	__u32 rule;
};

struct flow_state {
	__s64 last;   // newest time seen by the limiter
	__s64 seen;   // newest time seen by the table (idle timeout)
	__s64 tokens; // token bucket, nano-units
	__u64 win;    // window index, or the fraction's high word
	__u64 cur;    // current window's count, or the fraction's low word
	__s64 prev;   // previous window's count
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfg);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule_entry);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} src_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} dst_cidrs SEC(".maps");

// flows holds, for each limit rule, an LRU map of its flows of the rule's
// own max-flows (the loader makes them; the kernel's check of an inner
// hash map does not compare sizes), so that a rule's flood evicts only that
// rule's flows.
struct inner_flows {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	// Sizes, not types: clang leaves the types of a map only reached
	// through the outer map's declaration as forward declarations.
	__uint(key_size, sizeof(struct flow_key));
	__uint(value_size, sizeof(struct flow_state));
};

// The flow types in BTF, for bpf2go's Go types (as cilium/ebpf's examples
// force a type into the ELF).
const struct flow_key *unused_flow_key __attribute__((unused));
const struct flow_state *unused_flow_state __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__array(values, struct inner_flows);
} flows SEC(".maps");

// Striped locks over the flow states (an LRU hash's values cannot hold a
// bpf_spin_lock): a key's state changes under locks[hash(key) % N_LOCKS].
#define N_LOCKS 4096
struct flow_lock {
	struct bpf_spin_lock lock;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_LOCKS);
	__type(key, __u32);
	__type(value, struct flow_lock);
} locks SEC(".maps");

static __always_inline __u32 key_hash(struct flow_key *k)
{
	__u32 *w = (__u32 *)k, h = 2166136261u;
	for (int i = 0; i < sizeof(*k) / 4; i++) {
		h ^= w[i];
		h *= 16777619u;
	}
	return h ^ (h >> 15);
}

struct rule_counters {
	__u64 c[C_N];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_RULES + 1);
	__type(key, __u32);
	__type(value, struct rule_counters);
} counters SEC(".maps");

// The decoded packet, as flows.Packet.
struct pkt {
	__u32 src[4], dst[4]; // network order words
	__u16 sport, dport;
	__u8 family, proto;
	__u8 noports, frag;
	__s64 length;
};

static __always_inline void count(__u32 i, int c)
{
	struct rule_counters *cs = bpf_map_lookup_elem(&counters, &i);
	if (cs && c >= 0 && c < C_N)
		cs->c[c]++;
}

// 64×64 → 128-bit product, as math/bits.Mul64.
static __always_inline void mul64(__u64 a, __u64 b, __u64 *hi, __u64 *lo)
{
	__u64 a0 = a & 0xffffffff, a1 = a >> 32, b0 = b & 0xffffffff, b1 = b >> 32;
	__u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
	__u64 mid = (p00 >> 32) + (p01 & 0xffffffff) + (p10 & 0xffffffff);
	*lo = (mid << 32) | (p00 & 0xffffffff);
	*hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

// a + b + cin, as math/bits.Add64.
static __always_inline __u64 add64(__u64 a, __u64 b, __u64 cin, __u64 *cout)
{
	__u64 s = a + b;
	__u64 c1 = s < a;
	__u64 s2 = s + cin;
	__u64 c2 = s2 < s;
	*cout = c1 | c2;
	return s2;
}

static __always_inline __s64 floor_div(__s64 a, __s64 b)
{
	if (b <= 0)
		return 0;
	if (a >= 0)
		return (__s64)((__u64)a / (__u64)b);
	return -(__s64)(((__u64)(-a) + (__u64)b - 1) / (__u64)b);
}

// allow is shaper.Limiter.Allow for the token bucket, the fixed window and
// the sliding-window counter.
static __always_inline int allow(struct rule_entry *r, struct flow_state *s, __s64 now, __s64 cost)
{
	if (now < s->last)
		now = s->last;
	if (r->algo == ALGO_TB) {
		__u64 elapsed = (__u64)now - (__u64)s->last;
		if (elapsed != 0) {
			__u64 h1, l1, h2, l2, ih, il, c, c1, c2, c3, lo, hi, add;
			s->last = now;
			mul64(elapsed, r->rate_lo, &h1, &l1);
			mul64(elapsed, r->rate_hi, &h2, &l2);
			lo = add64(l1, s->cur, 0, &c);
			hi = add64(l2, h1, c, &c1);
			hi = add64(hi, s->win, 0, &c2);
			mul64(elapsed, r->rate_int, &ih, &il);
			add = add64(h2 + c1 + c2, il, 0, &c3);
			__u64 space = r->burst - (__u64)s->tokens;
			if (ih != 0 || c3 != 0 || add >= space) {
				s->tokens = r->burst;
				s->win = 0;
				s->cur = 0;
			} else {
				s->tokens += add;
				s->win = hi;
				s->cur = lo;
			}
		}
		__s64 need = cost * (__s64)NANO;
		if (s->tokens < need)
			return 0;
		s->tokens -= need;
		return 1;
	}
	s->last = now;
	__s64 w = floor_div(now, r->window);
	if (r->algo == ALGO_FW) {
		if (w != (__s64)s->win) {
			s->win = w;
			s->cur = 0;
		}
		if ((__s64)s->cur + cost > r->limit)
			return 0;
		s->cur += cost;
		return 1;
	}
	// ALGO_SWC
	if (w != (__s64)s->win) {
		if (w == (__s64)s->win + 1)
			s->prev = s->cur;
		else
			s->prev = 0;
		s->win = w;
		s->cur = 0;
	}
	__s64 room = r->limit - (__s64)s->cur - cost;
	if (room < 0)
		return 0;
	if (s->prev > 0) {
		__s64 left = r->window - (now - (__s64)s->win * r->window);
		__u64 ph, pl, rh, rl;
		mul64((__u64)s->prev, (__u64)left, &ph, &pl);
		mul64((__u64)room, (__u64)r->window, &rh, &rl);
		if (ph > rh || (ph == rh && pl > rl))
			return 0;
	}
	s->cur += cost;
	return 1;
}

// reset is shaper.Limiter.Reset: a full bucket, empty windows.
static __always_inline void reset(struct rule_entry *r, struct flow_state *s, __s64 now)
{
	s->last = now;
	s->tokens = r->burst;
	s->win = r->algo == ALGO_TB ? 0 : floor_div(now, r->window);
	s->cur = 0;
	s->prev = 0;
}

static __always_inline void mask_addr(__u32 *w, int nwords, int bits)
{

	for (int j = 0; j < 4; j++) {
		if (j >= nwords)
			break;
		int b = bits - 32 * j;
		if (b >= 32)
			continue;
		if (b <= 0)
			w[j] = 0;
		else
			w[j] &= bpf_htonl(~0U << (32 - b));
	}
}

// addr_less is flows' less: a before b, then ap before bp.
static __always_inline int addr_less(__u32 *a, __u16 ap, __u32 *b, __u16 bp)
{

	for (int j = 0; j < 4; j++) {
		__u32 x = bpf_ntohl(a[j]), y = bpf_ntohl(b[j]);
		if (x != y)
			return x < y;
	}
	return ap < bp;
}

// policy_ports: the protocols whose ports match.sport and match.dport see.
static __always_inline int policy_ports(__u8 proto)
{
	return proto == 6 || proto == 17 || proto == 136 || proto == 132;
}

static __always_inline int in_ranges(__u16 port, __u16 *lo, __u16 *hi, __u8 n)
{

	for (int k = 0; k < MAX_RANGES; k++) {
		if (k >= n)
			break;
		if (port >= lo[k] && port <= hi[k])
			return 1;
	}
	return 0;
}

// matches is one rule's match table against the packet, as policy's
// classifier decides it.
static __always_inline int matches(struct rule_entry *r, struct pkt *p, __u32 mark, __u32 ifindex)
{
	if (r->family && r->family != p->family)
		return 0;
	if (p->proto == 255 && r->has_proto) {
		// The protocol is unknown (a cut extension header chain, an
		// IPv6 later fragment): limit and drop rules' constraints
		// hold, accept rules' do not; for a later fragment only limit
		// rules'.
		if (p->frag ? r->orig != ACT_LIMIT : r->orig == ACT_ACCEPT)
			return 0;
	} else if (!((r->proto[(p->proto >> 6) & 3] >> (p->proto & 63)) & 1))
		return 0;
	if (r->n_sport || r->n_dport) {
		int known = policy_ports(p->proto);
		if (p->noports && (known || p->proto == 255)) {
			// Hidden ports: limit and drop rules' constraints hold,
			// accept rules' do not; for a later fragment, only
			// limit rules'.
			if (p->frag ? r->orig != ACT_LIMIT : r->orig == ACT_ACCEPT)
				return 0;
		} else if (!known) {
			return 0;
		} else {
			if (r->n_sport && !in_ranges(p->sport, r->sport_lo, r->sport_hi, r->n_sport))
				return 0;
			if (r->n_dport && !in_ranges(p->dport, r->dport_lo, r->dport_hi, r->n_dport))
				return 0;
		}
	}
	if (r->n_iif) {
		int ok = 0;

		for (int k = 0; k < MAX_IFS; k++)
			if (k < r->n_iif && r->iif[k] == ifindex)
				ok = 1;
		if (!ok)
			return 0;
	}
	if (r->has_mark && (mark & r->mark_mask) != r->mark)
		return 0;
	return 1;
}

// ports4/6 read the transport ports at off (l4 bytes up to end), as
// flows.Packet.ports.
static __always_inline void read_ports(struct __sk_buff *skb, struct pkt *p, __u32 off, __u32 end, int v6)
{
	__u8 b[8];
	__u32 n = end > off ? end - off : 0;
	switch (p->proto) {
	case 6:
	case 17:
	case 136:
	case 132:
		if (n < 4 || bpf_skb_load_bytes(skb, off, b, 4) < 0) {
			p->noports = 1;
			return;
		}
		p->sport = (__u16)b[0] << 8 | b[1];
		p->dport = (__u16)b[2] << 8 | b[3];
		return;
	case 1:
	case 58:
		if ((p->proto == 58) != v6)
			return;
		if (n < 4 || bpf_skb_load_bytes(skb, off, b, 4) < 0) {
			p->noports = 1;
			return;
		}
		__u8 typ = b[0], code = b[1];
		int echo = v6 ? (typ == 128 || typ == 129) : (typ == 8 || typ == 0);
		if (echo) {
			if (n < 8 || bpf_skb_load_bytes(skb, off, b, 8) < 0) {
				p->noports = 1;
				return;
			}
			p->sport = p->dport = (__u16)b[4] << 8 | b[5];
			return;
		}
		p->sport = (__u16)typ << 8 | code;
		return;
	}
}

// decode fills p from the packet at ETH_HLEN: 1 decoded, 0 for user space
// (malformed, IPv6 extension headers), -1 not IP.
static __always_inline int decode(struct __sk_buff *skb, struct pkt *p)
{
	__u32 l3 = ETH_HLEN;
	__u32 wire = skb->len > l3 ? skb->len - l3 : 0;
	__u8 h[40];
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (wire < 20 || bpf_skb_load_bytes(skb, l3, h, 20) < 0)
			return 0;
		if ((h[0] >> 4) != 4)
			return 0;
		__u32 ihl = (h[0] & 0x0f) * 4;
		if (ihl < 20)
			return 0;
		__u32 total = (__u32)h[2] << 8 | h[3];
		__u32 end = total;
		if (total < ihl) {
			if (total != 0)
				return 0;
			end = wire;
		}
		p->family = 4;
		p->length = total ? total : wire;
		if (p->length < ihl)
			p->length = ihl;
		p->proto = h[9];
		__builtin_memcpy(&p->src[0], &h[12], 4);
		__builtin_memcpy(&p->dst[0], &h[16], 4);
		__u16 frag = (__u16)h[6] << 8 | h[7];
		if (frag & 0x1fff) {
			p->frag = 1;
			__u8 pr = p->proto;
			p->noports = pr == 6 || pr == 17 || pr == 136 || pr == 132 || pr == 1 || pr == 58;
			return 1;
		}
		if (wire < ihl) {
			__u8 pr = p->proto;
			p->noports = pr == 6 || pr == 17 || pr == 136 || pr == 132 || pr == 1 || pr == 58;
			return 1;
		}
		if (end > wire)
			end = wire;
		read_ports(skb, p, l3 + ihl, l3 + end, 0);
		return 1;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (wire < 40 || bpf_skb_load_bytes(skb, l3, h, 40) < 0)
			return 0;
		if ((h[0] >> 4) != 6)
			return 0;
		__u32 plen = (__u32)h[4] << 8 | h[5];
		__u32 end = 40 + plen;
		p->family = 6;
		p->length = plen ? 40 + plen : wire;
		if (plen == 0)
			end = wire;
		__u8 next = h[6];
		__builtin_memcpy(p->src, &h[8], 16);
		__builtin_memcpy(p->dst, &h[24], 16);
		if (end > wire)
			end = wire;
		// The extension headers, as flows' decode6 walks them: at most
		// MAX_EXT here; a longer chain goes to user space.
		__u32 off = 40;
		int i;
		for (i = 0; i < MAX_EXT; i++) {
			__u8 e[4];
			__u32 n;
			if (next != 0 && next != 43 && next != 60 && next != 51 && next != 44)
				break;
			if (off + 8 > end || bpf_skb_load_bytes(skb, l3 + off, e, 4) < 0) {
				p->proto = 255; // cut: protocol unknown, ports out of reach
				p->noports = 1;
				return 1;
			}
			if (next == 44) {
				__u16 fo = ((__u16)e[2] << 8 | e[3]) >> 3;
				next = e[0];
				off += 8;
				if (fo != 0) {
					// A later fragment: its next header means
					// nothing (see flows' decode6).
					p->proto = 255;
					p->frag = 1;
					p->noports = 1;
					return 1;
				}
				continue;
			}
			n = next == 51 ? ((__u32)e[1] + 2) * 4 : ((__u32)e[1] + 1) * 8;
			if (off + n > end) {
				p->proto = 255;
				p->noports = 1;
				return 1;
			}
			next = e[0];
			off += n;
		}
		if (i == MAX_EXT && (next == 0 || next == 43 || next == 60 || next == 51 || next == 44))
			return 0; // a longer chain: user space walks it
		p->proto = next;
		if (next == 59)
			return 1;
		off &= 0xffff;
		read_ports(skb, p, l3 + off, l3 + end, 1);
		return 1;
	}
	return -1;
}

static __always_inline __u64 addr_bits(void *map, struct pkt *p, __u32 *addr, __u64 free)
{
	struct lpm_key k = {};
	k.data[0] = p->family;
	k.prefixlen = 8 + (p->family == 4 ? 32 : 128);
	__builtin_memcpy(&k.data[1], addr, 16);
	__u64 *v = bpf_map_lookup_elem(map, &k);
	return v ? *v : free;
}

struct match_ctx {
	struct pkt *p;
	__u64 cand;
	__u32 mark, ifindex;
	__s32 found;
};

// match_rule is bpf_loop's body: rule i against the packet; 1 stops at the
// first match (verified once, whatever the number of rules).
static long match_rule(__u32 i, void *data)
{
	struct match_ctx *mc = data;
	if (i >= MAX_RULES || !((mc->cand >> i) & 1))
		return 0;
	__u32 k = i;
	struct rule_entry *x = bpf_map_lookup_elem(&rules, &k);
	if (!x)
		return 1;
	if (matches(x, mc->p, mc->mark, mc->ifindex)) {
		mc->found = i;
		return 1;
	}
	return 0;
}

SEC("tc")
int fastpath(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct cfg *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	struct pkt p = {};
	int d = decode(skb, &p);
	if (d < 0)
		return TC_ACT_OK;
	count(MAX_RULES, C_PACKETS);
	if (d == 0) {
		skb->mark |= cfg->punt_mark;
		count(MAX_RULES, C_PUNTED);
		return TC_ACT_OK;
	}
	__u64 cand = addr_bits(&src_cidrs, &p, p.src, cfg->src_free) & addr_bits(&dst_cidrs, &p, p.dst, cfg->dst_free);
	struct match_ctx mc = {.p = &p, .cand = cand, .mark = skb->mark, .ifindex = skb->ingress_ifindex, .found = -1};
	__u32 n = cfg->nrules;
	if (n > MAX_RULES)
		n = MAX_RULES;
	bpf_loop(n, match_rule, &mc, 0);
	struct rule_entry *r = 0;
	__u32 ri = 0;
	if (mc.found >= 0 && mc.found < MAX_RULES) {
		ri = mc.found;
		r = bpf_map_lookup_elem(&rules, &ri);
	}
	if (!r) {
		count(MAX_RULES, C_ACCEPTED);
		return TC_ACT_OK;
	}
	count(ri, C_PACKETS);
	switch (r->action) {
	case ACT_ACCEPT:
		count(ri, C_ACCEPTED);
		return TC_ACT_OK;
	case ACT_DROP:
		count(ri, C_DROPPED);
		return TC_ACT_SHOT;
	case ACT_PUNT:
		count(ri, C_PUNTED);
		skb->mark |= cfg->punt_mark;
		return TC_ACT_OK;
	}
	// ACT_LIMIT: the flow key, as flows.KeyConfig.KeyTo.
	struct flow_key key = {};
	__u32 src[4], dst[4];
	__builtin_memcpy(src, p.src, 16);
	__builtin_memcpy(dst, p.dst, 16);
	__u16 sport = p.sport, dport = p.dport;
	if (p.family == 4) {
		mask_addr(src, 1, r->src4);
		mask_addr(dst, 1, r->dst4);
	} else {
		mask_addr(src, 4, r->src6);
		mask_addr(dst, 4, r->dst6);
	}
	if (r->symmetric && addr_less(dst, dport, src, sport)) {
		__u32 t[4];
		__builtin_memcpy(t, src, 16);
		__builtin_memcpy(src, dst, 16);
		__builtin_memcpy(dst, t, 16);
		__u16 tp = sport;
		sport = dport;
		dport = tp;
	}
	key.family = p.family;
	key.mode = r->mode;
	key.rule = r->id;
	switch (r->mode) {
	case MODE_5TUPLE:
		__builtin_memcpy(key.src, src, 16);
		__builtin_memcpy(key.dst, dst, 16);
		key.sport = sport;
		key.dport = dport;
		key.proto = p.proto;
		break;
	case MODE_SRC:
		__builtin_memcpy(key.src, src, 16);
		break;
	case MODE_DST:
		__builtin_memcpy(key.dst, dst, 16);
		break;
	default:
		__builtin_memcpy(key.src, src, 16);
		__builtin_memcpy(key.dst, dst, 16);
	}
	__s64 now = cfg->now ? (__s64)cfg->now : (__s64)bpf_ktime_get_boot_ns() + cfg->offset;
	__s64 cost = r->bytes ? p.length : 1;
	void *table = bpf_map_lookup_elem(&flows, &ri);
	if (!table) {
		// No flow map for the rule (the loader failed to give it
		// one): user space decides.
		count(ri, C_PUNTED);
		skb->mark |= cfg->punt_mark;
		return TC_ACT_OK;
	}
	struct flow_state *f = bpf_map_lookup_elem(table, &key);
	if (!f) {
		struct flow_state nf = {};
		reset(r, &nf, now);
		nf.seen = now;
		if (bpf_map_update_elem(table, &key, &nf, BPF_NOEXIST) == 0)
			count(ri, C_INSERTS);
		f = bpf_map_lookup_elem(table, &key);
		if (!f) {
			// No room even after the LRU's eviction: user space decides.
			count(ri, C_PUNTED);
			skb->mark |= cfg->punt_mark;
			return TC_ACT_OK;
		}
	}
	// The CPUs a key's packets arrive on take turns on its state, as
	// shaper's one goroutine per engine does.
	__u32 li = key_hash(&key) % N_LOCKS;
	struct flow_lock *lk = bpf_map_lookup_elem(&locks, &li);
	if (!lk)
		return TC_ACT_OK;
	bpf_spin_lock(&lk->lock);
	if (r->timeout > 0 && now - f->seen > r->timeout)
		reset(r, f, now);
	if (now > f->seen)
		f->seen = now;
	int ok = allow(r, f, now, cost);
	bpf_spin_unlock(&lk->lock);
	if (ok) {
		count(ri, C_ACCEPTED);
		return TC_ACT_OK;
	}
	switch (r->over) {
	case OVER_SHADOW:
		count(ri, C_SHADOW);
		count(ri, C_ACCEPTED);
		return TC_ACT_OK;
	case OVER_MARK:
		count(ri, C_MARKED);
		count(ri, C_ACCEPTED);
		skb->mark = (skb->mark & ~r->set_mask) | r->set_mark;
		return TC_ACT_OK;
	}
	count(ri, C_DROPPED);
	return TC_ACT_SHOT;
}

char __license[] SEC("license") = "Dual MIT/GPL";
