// SPDX-License-Identifier: (MIT OR GPL-2.0)
// The flow key, as flows.KeyConfig.KeyTo: mask_addr, addr_less, flow_key_of.

#ifndef FASTPATH_FLOWKEY_H
#define FASTPATH_FLOWKEY_H

#include "common.h"
#include "decode.h"

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

// flow_key_of builds rule r's key of packet p in key (zeroed by the
// caller), as flows.KeyConfig.KeyTo.
static __always_inline void flow_key_of(struct rule_entry *r, struct pkt *p, struct flow_key *key)
{
	__u32 src[4], dst[4];
	__builtin_memcpy(src, p->src, 16);
	__builtin_memcpy(dst, p->dst, 16);
	__u16 sport = p->sport, dport = p->dport;
	if (p->family == 4) {
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
	key->family = p->family;
	switch (r->mode) {
	case MODE_5TUPLE:
		__builtin_memcpy(key->src, src, 16);
		__builtin_memcpy(key->dst, dst, 16);
		key->sport = sport;
		key->dport = dport;
		key->proto = p->proto;
		break;
	case MODE_SRC:
		__builtin_memcpy(key->src, src, 16);
		break;
	case MODE_DST:
		__builtin_memcpy(key->dst, dst, 16);
		break;
	default:
		__builtin_memcpy(key->src, src, 16);
		__builtin_memcpy(key->dst, dst, 16);
	}
}

#endif
