// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Packet decoding: struct pkt, read_ports, decode (from the network header
// at a link type's offset: ETH_HLEN, or 0 on an L3 device), and the cost of
// a GSO/GRO packet: its segments (fastpath_gso).

#ifndef FASTPATH_DECODE_H
#define FASTPATH_DECODE_H

#include "common.h"

// The decoded packet, as flows.Packet, and what it costs.
struct pkt {
	__u32 src[4], dst[4]; // network order words
	__u16 sport, dport;
	__u8 family, proto;
	__u8 noports;
	__u8 frag;  // a later fragment (offset > 0)
	__u8 first; // a first fragment (offset 0, more fragments)
	__u8 gso;   // a GSO/GRO packet of several segments
	__u16 l4off; // the transport header's offset from the IP header
	__u32 frag_id; // the IP id (IPv4) or fragment identification (IPv6)
	// What the packet costs a byte rate: its IP length; a GSO packet's
	// segments' IP lengths together; a first IPv6 fragment less its
	// fragment header and a later fragment its data alone, so that a
	// datagram's fragments cost its reassembled length (frag.h).
	__s64 length;
	__s64 segs; // what it costs a packet rate: 1, a GSO packet's segments
};

// load_direct copies len bytes (a multiple of 4) at off of the packet to
// to from the packet's linear part: 0, or -1 when they do not all lie in
// it.
static __always_inline int load_direct(struct __sk_buff *skb, __u32 off, void *to, const __u32 len)
{
	// Read afresh at each call (volatile): no packet pointer outlives it,
	// so that the verifier's states after it are the helper's.
	void *data = (void *)(long)*(volatile __u32 *)&skb->data;
	void *data_end = (void *)(long)*(volatile __u32 *)&skb->data_end;
	if (off > 0xffff)
		return -1;
	__u32 *from = data + off;
	if ((void *)from + len > data_end)
		return -1;
	__u32 *dst = to;
	for (__u32 k = 0; k < len / 4; k++)
		dst[k] = from[k];
	return 0;
}

// load_bytes is bpf_skb_load_bytes for the headers of the common case: the
// same bytes, read straight from the packet's linear part when they lie in
// it (no helper call: a call and its return cost more than the copy on
// this program's machines, with their return-thunk mitigations), by the
// helper otherwise (the rest of a GSO or paged packet).
static __always_inline int load_bytes(struct __sk_buff *skb, __u32 off, void *to, const __u32 len)
{
	if (load_direct(skb, off, to, len) == 0)
		return 0;
	return bpf_skb_load_bytes(skb, off, to, len);
}

// policy_port_proto: TCP, UDP, UDP-Lite, SCTP (read_ports' 4-byte ports).
static __always_inline int policy_port_proto(__u8 proto)
{
	return proto == 6 || proto == 17 || proto == 136 || proto == 132;
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

static __always_inline int is_ext6(__u8 next)
{
	return next == 0 || next == 43 || next == 60 || next == 51 || next == 44;
}

// A chain walked past MAX_EXT headers: bpf_loop's state (ext_step).
struct ext_walk {
	struct __sk_buff *skb;
	struct pkt *p;
	__u32 l3, off, end;
	__u8 next;
	__u8 done; // decided: cut, or a later fragment
};

// EXT_LOOPS: the most headers bpf_loop walks (its own limit, BPF_MAX_LOOPS):
// every header is at least 8 bytes, so a chain in a packet under 64 MiB
// ends (or is cut) within it.
#define EXT_LOOPS (1U << 23)

// ext_step is bpf_loop's body: one extension header at w->off, as an
// iteration of decode_ip's walk; 1 stops (the chain ended, or decided).
static long ext_step(__u32 i, void *data)
{
	struct ext_walk *w = data;
	struct pkt *p = w->p;
	__u8 next = w->next;
	__u8 e[8];
	__u32 n;
	if (!p || !is_ext6(next))
		return 1;
	if (w->off + 8 > w->end || bpf_skb_load_bytes(w->skb, w->l3 + w->off, e, 8) < 0) {
		p->proto = 255;
		p->noports = 1;
		w->done = 1;
		return 1;
	}
	if (next == 44) {
		__u16 fo = (__u16)e[2] << 8 | e[3];
		w->next = e[0];
		w->off += 8;
		__builtin_memcpy(&p->frag_id, &e[4], 4);
		if (fo >> 3) {
			p->proto = 255;
			p->frag = 1;
			p->noports = 1;
			p->length = p->length > w->off ? p->length - w->off : 0;
			w->done = 1;
			return 1;
		}
		if (fo & 1 && !p->first) {
			p->first = 1;
			p->length -= 8;
		}
		return 0;
	}
	n = next == 51 ? ((__u32)e[1] + 2) * 4 : ((__u32)e[1] + 1) * 8;
	if (w->off + n > w->end) {
		p->proto = 255;
		p->noports = 1;
		w->done = 1;
		return 1;
	}
	w->next = e[0];
	w->off += n;
	return 0;
}

// fastpath_ext6 walks the rest of a chain longer than MAX_EXT headers, from
// the header next at off, as flows' decode6 does (for as long as the bytes
// last), and reads the ports after it: decode_ip's result, 1 decoded (0,
// user space, only for a chain bpf_loop cannot reach the end of). at is
// next << 8 | l3 (a global function takes at most five arguments; l3 is
// ETH_HLEN or 0).
//
// A global function, verified once apart and called only past MAX_EXT
// headers: an ordinary packet costs nothing more, and the walk's states do
// not multiply the rest of the program's.
__attribute__((noinline)) int fastpath_ext6(struct __sk_buff *skb, struct pkt *p, __u32 at, __u32 off, __u32 end)
{
	if (!p)
		return 0;
	__u32 l3 = at & 0xff;
	__u8 next = at >> 8;
	struct ext_walk w = {
		.skb = skb,
		.p = p,
		.l3 = l3,
		.off = off,
		.end = end,
		.next = next,
	};
	__u32 loops = end > off ? (end - off) / 8 + 1 : 1;
	if (loops > EXT_LOOPS)
		loops = EXT_LOOPS;
	bpf_loop(loops, ext_step, &w, 0);
	if (w.done)
		return 1;
	if (is_ext6(w.next))
		return 0;
	p->proto = w.next;
	p->l4off = w.off & 0xffff;
	if (w.next == 59)
		return 1;
	read_ports(skb, p, l3 + w.off, l3 + end, 1);
	return 1;
}

// decode_ip fills p from the packet's IP header at l3: 1 decoded, 0 for
// user space (malformed), -1 not IP.
static __always_inline int decode_ip(struct __sk_buff *skb, struct pkt *p, const __u32 l3)
{
	__u32 wire = skb->len > l3 ? skb->len - l3 : 0;
	__u8 h[40] __attribute__((aligned(4)));
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		// The header and, in the common case (no options), the ports
		// after it in one copy from the packet (load_bytes).
		int with_ports = wire >= 24 && load_direct(skb, l3, h, 24) == 0;
		if (!with_ports && (wire < 20 || load_bytes(skb, l3, h, 20) < 0))
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
		p->frag_id = (__u32)h[4] << 8 | h[5];
		p->l4off = ihl;
		if (frag & 0x1fff) {
			p->frag = 1;
			p->length -= ihl; // its data: the header was charged with the first
			__u8 pr = p->proto;
			p->noports = pr == 6 || pr == 17 || pr == 136 || pr == 132 || pr == 1 || pr == 58;
			return 1;
		}
		p->first = (frag & 0x2000) != 0;
		if (wire < ihl) {
			__u8 pr = p->proto;
			p->noports = pr == 6 || pr == 17 || pr == 136 || pr == 132 || pr == 1 || pr == 58;
			return 1;
		}
		if (end > wire)
			end = wire;
		if (with_ports && ihl == 20 && end >= 24 && policy_port_proto(p->proto)) {
			// read_ports' bytes, already copied.
			p->sport = (__u16)h[20] << 8 | h[21];
			p->dport = (__u16)h[22] << 8 | h[23];
			return 1;
		}
		read_ports(skb, p, l3 + ihl, l3 + end, 0);
		return 1;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (wire < 40 || load_bytes(skb, l3, h, 40) < 0)
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
		// The extension headers, as flows' decode6 walks them: MAX_EXT
		// here; the rest of a longer chain in fastpath_ext6.
		__u32 off = 40;
		int i;
		for (i = 0; i < MAX_EXT; i++) {
			__u8 e[8];
			__u32 n;
			if (next != 0 && next != 43 && next != 60 && next != 51 && next != 44)
				break;
			if (off + 8 > end || bpf_skb_load_bytes(skb, l3 + off, e, 8) < 0) {
				p->proto = 255; // cut: protocol unknown, ports out of reach
				p->noports = 1;
				return 1;
			}
			if (next == 44) {
				__u16 fo = (__u16)e[2] << 8 | e[3];
				next = e[0];
				off += 8;
				__builtin_memcpy(&p->frag_id, &e[4], 4);
				if (fo >> 3) {
					// A later fragment: its next header means
					// nothing (see flows' decode6).
					p->proto = 255;
					p->frag = 1;
					p->noports = 1;
					// Its data, after the fragment header.
					p->length = p->length > off ? p->length - off : 0;
					return 1;
				}
				if (fo & 1 && !p->first) {
					// A first fragment: the reassembled datagram
					// has no fragment header.
					p->first = 1;
					p->length -= 8;
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
		if (i == MAX_EXT && is_ext6(next))
			return fastpath_ext6(skb, p, (__u32)next << 8 | l3, off, end);
		p->proto = next;
		off &= 0xffff;
		p->l4off = off;
		if (next == 59)
			return 1;
		read_ports(skb, p, l3 + off, l3 + end, 1);
		return 1;
	}
	return -1;
}

// fastpath_gso sets what a GSO/GRO packet (gso_size set) costs: under a packet
// rate its segments, skb->gso_segs or, when the sender left it 0 (a virtio
// header), the count from its length and gso_size; under a byte rate the IP
// lengths of those segments together, as the queue path charges them (nfq
// segments a GSO packet and queues each segment): every segment carries the
// headers, so L + (segs - 1) x H for a packet of IP length L and headers of
// H bytes (IP, extension headers and the transport header; at least
// L - segs x gso_size, which covers tunnel headers the program does not
// walk).
//
// A global function, verified once apart and called for GSO packets only:
// inlined, its paths multiplied the rest of the program's past the
// verifier's million instructions.
__attribute__((noinline)) int fastpath_gso(struct __sk_buff *skb, struct pkt *p, __u32 l3, __u32 gso_size)
{
	if (!p || !gso_size)
		return 0;
	__s64 hdr = p->l4off;
	if (p->proto == 17 || p->proto == 136) {
		hdr += 8;
	} else if (p->proto == 6) {
		__u8 b[1];
		if (bpf_skb_load_bytes(skb, l3 + p->l4off + 12, b, 1) == 0)
			hdr += (b[0] >> 4) * 4;
	}
	if (hdr > p->length)
		hdr = p->length;
	__s64 segs = skb->gso_segs;
	if (segs <= 0)
		segs = (__s64)((__u64)(p->length - hdr + gso_size - 1) / gso_size);
	if (segs <= 1)
		return 0;
	if (segs > 65535)
		segs = 65535;
	__s64 least = p->length - segs * (__s64)gso_size;
	if (hdr < least)
		hdr = least;
	p->gso = 1;
	p->segs = segs;
	p->length += (segs - 1) * hdr;
	return 0;
}

// decode fills p from the packet whose IP header is at l3 (ETH_HLEN on an
// Ethernet link, 0 on an L3 one): 1 decoded, 0 for user space (malformed),
// -1 not IP.
static __always_inline int decode(struct __sk_buff *skb, struct pkt *p, const __u32 l3)
{
	p->segs = 1;
	int d = decode_ip(skb, p, l3);
	if (d <= 0 || p->frag || p->first)
		return d;
	__u32 gso_size = skb->gso_size;
	if (gso_size)
		fastpath_gso(skb, p, l3, gso_size);
	return d;
}

#endif
