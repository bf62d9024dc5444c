// SPDX-License-Identifier: (MIT OR GPL-2.0)
// The limiter's arithmetic, as package shaper's: mul64, add64, floor_div, allow, reset.

#ifndef FASTPATH_LIMITER_H
#define FASTPATH_LIMITER_H

#include "common.h"

// 64×64 → 128-bit product, as math/bits.Mul64. Factors under 2^32 (the
// common case: a rate's fraction words are 0 for a whole rate per ns, and
// the time since a flow's last packet is under 4.3 s) take one multiply:
// the same product, no 128-bit arithmetic.
static __always_inline void mul64(__u64 a, __u64 b, __u64 *hi, __u64 *lo)
{
	if (!((a | b) >> 32)) {
		*hi = 0;
		*lo = a * b;
		return;
	}
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

// allow is shaper.Limiter.AllowNeed (Allow when need is NEED_ALL) for the
// token bucket, the fixed window and the sliding-window counter: accepted
// iff the state holds need (see common.h's NEED_*), then charged cost.
static __always_inline int allow(struct rule_entry *r, struct flow_state *s, __s64 now, __s64 cost, int need)
{
	if (need == NEED_OVER)
		return 0;
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
		__s64 c = cost * (__s64)NANO, h = c;
		if (need == NEED_CAP && h > (__s64)r->burst)
			h = r->burst;
		if (need != NEED_NONE && s->tokens < h)
			return 0;
		s->tokens -= c;
		if (s->tokens < -DEBT_MAX)
			s->tokens = -DEBT_MAX;
		return 1;
	}
	s->last = now;
	__s64 w = floor_div(now, r->window);
	if (r->algo == ALGO_FW) {
		if (w != (__s64)s->win) {
			s->win = w;
			s->cur = 0;
		}
		__s64 h = need == NEED_CAP && cost > r->limit ? r->limit : cost;
		if (need != NEED_NONE && (__s64)s->cur + h > r->limit)
			return 0;
		s->cur += cost;
		if ((__s64)s->cur > DEBT_MAX)
			s->cur = DEBT_MAX;
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
	__s64 h = need == NEED_CAP && cost > r->limit ? r->limit : cost;
	__s64 room = r->limit - (__s64)s->cur - h;
	if (need != NEED_NONE && room < 0)
		return 0;
	if (need != NEED_NONE && s->prev > 0) {
		__s64 left = r->window - (now - (__s64)s->win * r->window);
		__u64 ph, pl, rh, rl;
		mul64((__u64)s->prev, (__u64)left, &ph, &pl);
		mul64((__u64)room, (__u64)r->window, &rh, &rl);
		if (ph > rh || (ph == rh && pl > rl))
			return 0;
	}
	s->cur += cost;
	if ((__s64)s->cur > DEBT_MAX)
		s->cur = DEBT_MAX;
	return 1;
}

// reset is shaper.Limiter.Reset: a full bucket, empty windows (tokens and
// prev share a word: the algorithm's).
static __always_inline void reset(struct rule_entry *r, struct flow_state *s, __s64 now)
{
	s->last = now;
	s->cur = 0;
	if (r->algo == ALGO_TB) {
		s->tokens = r->burst;
		s->win = 0;
	} else {
		s->prev = 0;
		s->win = floor_div(now, r->window);
	}
}

#endif
