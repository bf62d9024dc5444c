// SPDX-License-Identifier: (MIT OR GPL-2.0)
// Packet decoding: struct pkt, read_ports, decode.

#ifndef FASTPATH_DECODE_H
#define FASTPATH_DECODE_H

#include "common.h"

// The decoded packet, as flows.Packet.
struct pkt {
	__u32 src[4], dst[4]; // network order words
	__u16 sport, dport;
	__u8 family, proto;
	__u8 noports, frag;
	__s64 length;
};

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

#endif
