// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Fragments: every fragment of a datagram is decided as its first fragment
// was, by the same rule and charged to the same flow, as cilium's fragment
// map (bpf/lib/ipv4.h, ipv6.h) carries a first fragment's ports to the
// later ones. The queue path sees datagrams whole (rules.sh add
// --fastpath's socket-match rule, or --conntrack's conntrack match, keeps
// the kernel's defragmentation on, before the queue):
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
// verdict the datagram then has. Its data is kept in the entry (pending)
// and charged with the first fragment when that comes, so that sending a
// datagram's fragments in reverse order costs its flow what sending them
// in order does.

#ifndef FASTPATH_FRAG_H
#define FASTPATH_FRAG_H

#include "common.h"
#include "decode.h"
#include "maps.h"

#define FRAG_ENTRIES 8192
// The most pending data a first fragment is charged (a datagram is at most
// 64 KiB; more is later fragments sent again).
#define PENDING_MAX (1 << 20)

struct frag_key {
	__u32 src[4], dst[4];
	__u32 id;
	__u8 family, proto, _pad[2];
};

struct frag_val {
	struct pkt p;       // the first fragment's headers
	__u32 mark, ifindex; // what it was matched with
	__u32 ok;           // its limit accepted it (limit rules only)
	__u32 first;        // the first fragment was seen (else only pending)
	__s64 pending;      // data of later fragments before the first
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FRAG_ENTRIES);
	__type(key, struct frag_key);
	__type(value, struct frag_val);
} frags SEC(".maps");

// A CPU's scratch entry to insert from (a frag_val on the stack would take
// fastpath_frag's frame, beside the entry point's, past the 512 bytes).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct frag_val);
} frag_scratch SEC(".maps");

static __always_inline void frag_key_of(struct pkt *p, struct frag_key *k)
{
	__builtin_memcpy(k->src, p->src, 16);
	__builtin_memcpy(k->dst, p->dst, 16);
	k->id = p->frag_id;
	k->family = p->family;
	k->proto = p->family == 4 ? p->proto : 0;
}

// frag_io is fastpath_frag's in and out: the limit's need, the mark and
// input interface to match with, and the punt mark.
struct frag_io {
	__u32 need, mark, ifindex, punt_mark;
};

// fastpath_frag is called for a first or a later fragment (p->first or
// p->frag) before it is matched. A first fragment is recorded (its limit's
// verdict later, fastpath_frag_ok); a later one takes its first fragment's
// headers into p (its own cost kept), with io's mark and ifindex to match
// with and io's need for the limit. It returns -1 to go on deciding, or the
// tc verdict of a later fragment that goes to user space. A global
// function, as fastpath_decode: verified once, apart, in its own stack
// frame.
__attribute__((noinline)) int fastpath_frag(struct __sk_buff *skb, struct pkt *p, struct frag_io *io)
{
	if (!p || !io)
		return -1;
	struct frag_key k = {};
	frag_key_of(p, &k);
	__u32 zero = 0;
	struct frag_val *nv = bpf_map_lookup_elem(&frag_scratch, &zero);
	if (!nv)
		return -1;
	__builtin_memset(nv, 0, sizeof(*nv));
	struct frag_val *v = bpf_map_lookup_elem(&frags, &k);
	if (!p->frag) {
		__s64 pending = v && !v->first ? v->pending : 0;
		nv->p = *p;
		nv->mark = io->mark;
		nv->ifindex = io->ifindex;
		nv->ok = 1;
		nv->first = 1;
		bpf_map_update_elem(&frags, &k, nv, BPF_ANY);
		if (pending > PENDING_MAX)
			pending = PENDING_MAX; // duplicates: no datagram is larger
		if (pending > 0)
			p->length += pending;
		return -1;
	}
	if (!v || !v->first) {
		if (v) {
			__sync_fetch_and_add(&v->pending, p->length);
		} else {
			nv->pending = p->length;
			bpf_map_update_elem(&frags, &k, nv, BPF_NOEXIST);
		}
		skb->mark |= io->punt_mark;
		count2(MAX_RULES, C_PACKETS, C_PUNTED);
		return TC_ACT_OK;
	}
	__s64 length = p->length;
	*p = v->p;
	p->length = length;
	p->segs = 0; // the datagram is one packet, counted at its first fragment
	p->first = 0;
	p->gso = 0;
	io->mark = v->mark;
	io->ifindex = v->ifindex;
	io->need = v->ok ? NEED_NONE : NEED_OVER;
	return -1;
}

// fastpath_frag_ok records the limit's verdict of the first fragment p.
__attribute__((noinline)) int fastpath_frag_ok(struct pkt *p, __u32 ok)
{
	if (!p)
		return 0;
	struct frag_key k = {};
	frag_key_of(p, &k);
	struct frag_val *v = bpf_map_lookup_elem(&frags, &k);
	if (v && v->first)
		v->ok = ok;
	return 0;
}

#endif
