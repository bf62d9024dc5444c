// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Fragments: every fragment of a datagram is decided as its first fragment
// was, by the same rule and charged to the same flow, as cilium's fragment
// map (bpf/lib/ipv4.h, ipv6.h) carries a first fragment's ports to the
// later ones. The queue path sees datagrams whole (the divert rule's
// conntrack match keeps the kernel's defragmentation on, before the queue):
// this gives the kernel path the same datagram, decided at its first
// fragment.
//
// A first fragment (offset 0, more to come) is decoded and decided as any
// packet; before that its decoded headers, mark and input interface go into
// frags under the datagram's reassembly key (family, source, destination,
// IP id, and for IPv4 the protocol: the kernel's ip_defrag key; IPv6's
// ignores the later fragments' next header, which means nothing). A later
// fragment found there is decided as its first fragment: the same headers,
// so the same rule (the rule table does not change under a program) and the
// same flow key, with need NEED_NONE when the first fragment's limit
// accepted it (the datagram was accepted: its later fragments are charged
// their data as debt, never refused) or NEED_OVER when the limit refused it
// (refused too, charged nothing). A later fragment not found (it came before
// its first fragment, the map's LRU evicted the entry, the first fragment
// went to user space) goes to user space: punt mark, never another rule or
// bucket; the kernel's reassembly puts it with its first fragment, whose
// verdict the datagram then has.

#ifndef FASTPATH_FRAG_H
#define FASTPATH_FRAG_H

#include "common.h"
#include "decode.h"
#include "maps.h"

#define FRAG_ENTRIES 8192

struct frag_key {
	__u32 src[4], dst[4];
	__u32 id;
	__u8 family, proto, _pad[2];
};

struct frag_val {
	struct pkt p;       // the first fragment's headers
	__u32 mark, ifindex; // what it was matched with
	__u32 ok;           // its limit accepted it (limit rules only)
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FRAG_ENTRIES);
	__type(key, struct frag_key);
	__type(value, struct frag_val);
} frags SEC(".maps");

static __always_inline void frag_key_of(struct pkt *p, struct frag_key *k)
{
	__builtin_memcpy(k->src, p->src, 16);
	__builtin_memcpy(k->dst, p->dst, 16);
	k->id = p->frag_id;
	k->family = p->family;
	k->proto = p->family == 4 ? p->proto : 0;
}

// frag_resolve is called for a first or a later fragment (p->first or
// p->frag) before it is matched. A first fragment is recorded (*fv: its
// entry, for the limit's verdict); a later one takes its first fragment's
// headers into p (its own cost kept), with *mark and *ifindex to match with
// and *need for the limit. It returns -1 to go on deciding, or the tc
// verdict of a later fragment that goes to user space.
static __always_inline int frag_resolve(struct __sk_buff *skb, __u32 punt_mark, struct pkt *p,
					struct frag_val **fv, int *need, __u32 *mark, __u32 *ifindex)
{
	struct frag_key k = {};
	frag_key_of(p, &k);
	if (!p->frag) {
		struct frag_val v = {.p = *p, .mark = *mark, .ifindex = *ifindex, .ok = 1};
		bpf_map_update_elem(&frags, &k, &v, BPF_ANY);
		*fv = bpf_map_lookup_elem(&frags, &k);
		return -1;
	}
	struct frag_val *v = bpf_map_lookup_elem(&frags, &k);
	if (!v) {
		skb->mark |= punt_mark;
		count2(MAX_RULES, C_PACKETS, C_PUNTED);
		return TC_ACT_OK;
	}
	__s64 length = p->length;
	*p = v->p;
	p->length = length;
	p->segs = 0; // the datagram is one packet, counted at its first fragment
	p->first = 0;
	p->gso = 0;
	*mark = v->mark;
	*ifindex = v->ifindex;
	*need = v->ok ? NEED_NONE : NEED_OVER;
	return -1;
}

#endif
