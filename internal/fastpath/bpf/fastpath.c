// SPDX-License-Identifier: (MIT OR GPL-2.0)
// The fast path: a tc (tcx) classifier that decides in the kernel the rules
// of a policy the kernel can enforce, with the same rule order, first-match
// semantics and integer arithmetic as package shaper, and marks the rest for
// the NFQUEUE divert rule (see ../doc.go). This file is the entry point; the
// headers hold its parts by job (as cilium's bpf/lib): common.h (limits,
// enums, the structs Go shares), maps.h, decode.h, match.h, limiter.h,
// flowkey.h, flowstate.h, frag.h.

#include "common.h"
#include "maps.h"
#include "decode.h"
#include "match.h"
#include "limiter.h"
#include "flowkey.h"
#include "flowstate.h"
#include "frag.h"

// fastpath_run decides the packet whose IP header is at l3 (a constant of
// each entry point below).
static __always_inline int fastpath_run(struct __sk_buff *skb, const __u32 l3)
{
	__u32 zero = 0;
	struct cfg *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	struct pkt p = {};
	int d = decode(skb, &p, l3);
	if (d < 0)
		return TC_ACT_OK;
	if (d == 0) {
		skb->mark |= cfg->punt_mark;
		count2(MAX_RULES, C_PACKETS, C_PUNTED);
		return TC_ACT_OK;
	}
	// Fragments are decided as their first fragment (frag.h).
	struct frag_io fio = {.need = p.gso ? NEED_CAP : NEED_ALL, .mark = skb->mark, .ifindex = skb->ingress_ifindex, .punt_mark = cfg->punt_mark};
	if (p.frag | p.first) {
		int v = fastpath_frag(skb, &p, &fio);
		if (v >= 0)
			return v;
	}
	struct match_ctx mc = {.p = &p, .cand = match_candidates(cfg, &p), .mark = fio.mark, .ifindex = fio.ifindex};
	__s32 found = match_first(&mc, cfg->nrules);
	struct rule_entry *r = 0;
	__u32 ri = 0;
	if (found >= 0 && found < MAX_RULES) {
		ri = found;
		r = bpf_map_lookup_elem(&rules, &ri);
	}
	if (!r) {
		count2(MAX_RULES, C_PACKETS, C_ACCEPTED);
		return TC_ACT_OK;
	}
	struct rule_counters *cs = bpf_map_lookup_elem(&counters, &ri);
	if (!cs)
		return TC_ACT_OK;
	cs->c[C_PACKETS]++;
	switch (r->action) {
	case ACT_ACCEPT:
		cs->c[C_ACCEPTED]++;
		return TC_ACT_OK;
	case ACT_DROP:
		cs->c[C_DROPPED]++;
		return TC_ACT_SHOT;
	case ACT_PUNT:
		cs->c[C_PUNTED]++;
		skb->mark |= cfg->punt_mark;
		return TC_ACT_OK;
	}
	// ACT_LIMIT: the flow key, as flows.KeyConfig.KeyTo.
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return TC_ACT_OK;
	struct flow_key *key = &sc->key;
	__builtin_memset(key, 0, sizeof(*key));
	flow_key_of(r, &p, key);
	__s64 now = cfg->now ? (__s64)cfg->now : (__s64)bpf_ktime_get_boot_ns() + cfg->offset;
	__s64 cost = r->bytes ? p.length : p.segs;
	__s64 tcost = r->tbytes ? p.length : p.segs; // its total's, if any
	int ok = flow_verdict(r, cs, ri, key, now, cost, tcost, fio.need);
	if (ok < 0) {
		// No flow map, no room, or the state's lock not had: user
		// space decides.
		cs->c[C_PUNTED]++;
		skb->mark |= cfg->punt_mark;
		return TC_ACT_OK;
	}
	if (p.first)
		fastpath_frag_ok(&p, ok);
	if (ok) {
		cs->c[C_ACCEPTED]++;
		return TC_ACT_OK;
	}
	switch (r->over) {
	case OVER_SHADOW:
		cs->c[C_SHADOW]++;
		cs->c[C_ACCEPTED]++;
		return TC_ACT_OK;
	case OVER_MARK:
		cs->c[C_MARKED]++;
		cs->c[C_ACCEPTED]++;
		skb->mark = (skb->mark & ~r->set_mask) | r->set_mark;
		return TC_ACT_OK;
	}
	cs->c[C_DROPPED]++;
	return TC_ACT_SHOT;
}

// The entry points, one per link type (Program.ProgFor picks one): an
// Ethernet link's frames start with the Ethernet header, an L3 device's
// (tun, WireGuard, ipip, gre, sit) with the IP header; skb->protocol gives
// the family on both.
SEC("tc")
int fastpath(struct __sk_buff *skb)
{
	return fastpath_run(skb, ETH_HLEN);
}

SEC("tc")
int fastpath_l3(struct __sk_buff *skb)
{
	return fastpath_run(skb, 0);
}

char __license[] SEC("license") = "Dual MIT/GPL";
