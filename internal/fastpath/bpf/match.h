// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Rule matching: ports, ranges, matches, addr_bits, match_rule.

#ifndef FASTPATH_MATCH_H
#define FASTPATH_MATCH_H

#include "common.h"
#include "maps.h"
#include "decode.h"

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

static __always_inline __u64 addr_bits(void *map, struct pkt *p, __u32 *addr, __u64 free)
{
	struct lpm_key k = {};
	k.data[0] = p->family;
	k.prefixlen = 8 + (p->family == 4 ? 32 : 128);
	__builtin_memcpy(&k.data[1], addr, 16);
	__u64 *v = bpf_map_lookup_elem(map, &k);
	return v ? *v : free;
}

// match_candidates: the rules whose address constraints the packet meets
// (a bit each), from the tries that hold prefixes of its family.
static __always_inline __u64 match_candidates(struct cfg *cfg, struct pkt *p)
{
	int v6 = p->family == 6;
	__u64 src = cfg->src_free, dst = cfg->dst_free;
	if (cfg->lpm & (v6 ? LPM_SRC6 : LPM_SRC4))
		src = addr_bits(&src_cidrs, p, p->src, src);
	if (cfg->lpm & (v6 ? LPM_DST6 : LPM_DST4))
		dst = addr_bits(&dst_cidrs, p, p->dst, dst);
	return src & dst;
}

struct match_ctx {
	struct pkt *p;
	__u64 cand;
	__u32 mark, ifindex;
	__s32 found;
};

// N_UNROLLED: the rules tried in a bounded loop (verified once per rule,
// no call per rule); the rest by bpf_loop (verified once whatever their
// number, a callback per rule).
#define N_UNROLLED 8

// match_rule is bpf_loop's body: rule N_UNROLLED + i against the packet; 1
// stops at the first match, or when no candidate is left.
static long match_rule(__u32 i, void *data)
{
	struct match_ctx *mc = data;
	i += N_UNROLLED;
	if (i >= MAX_RULES || !(mc->cand >> i))
		return 1;
	if (!((mc->cand >> i) & 1))
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

// match_first is the first of the n rules that are candidates (mc->cand)
// and match the packet, or -1.
static __always_inline __s32 match_first(struct match_ctx *mc, __u32 n)
{
	if (n > MAX_RULES)
		n = MAX_RULES;
	for (__u32 i = 0; i < N_UNROLLED; i++) {
		if (i >= n || !(mc->cand >> i))
			return -1;
		if (!((mc->cand >> i) & 1))
			continue;
		__u32 k = i;
		struct rule_entry *x = bpf_map_lookup_elem(&rules, &k);
		if (!x)
			return -1;
		if (matches(x, mc->p, mc->mark, mc->ifindex))
			return i;
	}
	if (n <= N_UNROLLED || !(mc->cand >> N_UNROLLED))
		return -1;
	mc->found = -1;
	bpf_loop(n - N_UNROLLED, match_rule, mc, 0);
	return mc->found;
}

#endif
