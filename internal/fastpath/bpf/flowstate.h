// SPDX-License-Identifier: (MIT OR GPL-2.0)
// A flow's state: found or made in its rule's map, changed by one CPU at a
// time.

#ifndef FASTPATH_FLOWSTATE_H
#define FASTPATH_FLOWSTATE_H

#include "common.h"
#include "maps.h"
#include "limiter.h"

// The CPUs a key's packets arrive on take turns on its state, as shaper's
// one goroutine per engine does, under the state's own lock (an LRU
// hash's values cannot hold a bpf_spin_lock): the low LOCK_BITS of the
// state's seen word, the table's time above them (one word fewer per
// flow: a state of 40 bytes). Taken by compare-and-swap of the whole word,
// released by an exchange (both full barriers); while it is held only its
// holder writes the word. Held for the few instructions of the limiter,
// never across a helper call. A tc program runs in softirq context and is
// not preempted while holding it, so the spin is short; LOCK_SPINS bounds
// it all the same.
#define LOCK_SPINS (1 << 16)

// A state's lock: free, held, or moved (a state of flows_new that went to
// flows: look there).
enum lock_state { LOCK_FREE = 0, LOCK_HELD = 1, LOCK_MOVED = 2 };
// The lock's bits at the bottom of flow_state.seen; the time above them
// is the seen time, unsigned: a time from 0 to 2^(64 - LOCK_BITS) - 1 ns
// (the year 2116 in Unix ns); the program leaves a packet of a time
// outside that range to user space (flow_verdict).
enum lock_word { LOCK_BITS = 2, LOCK_MASK = (1 << LOCK_BITS) - 1 };

const enum lock_state *unused_lock_state __attribute__((unused));
const enum lock_word *unused_lock_word __attribute__((unused));

static __always_inline __s64 seen_of(struct flow_state *f)
{
	return (__s64)(f->seen >> LOCK_BITS);
}

// set_seen sets f's seen time, its lock as it is (f's lock held).
static __always_inline void set_seen(struct flow_state *f, __s64 t)
{
	f->seen = ((__u64)t << LOCK_BITS) | (f->seen & LOCK_MASK);
}

// state_trylock: 1 taken, 0 held by another CPU, -2 moved.
static __always_inline int state_trylock(struct flow_state *f)
{
	__u64 w = *(volatile __u64 *)&f->seen;
	if ((w & LOCK_MASK) == LOCK_MOVED)
		return -2;
	if ((w & LOCK_MASK) != LOCK_FREE)
		return 0;
	__u64 v = __sync_val_compare_and_swap(&f->seen, w, w | LOCK_HELD);
	if (v == w)
		return 1;
	return (v & LOCK_MASK) == LOCK_MOVED ? -2 : 0;
}

struct spin_ctx {
	struct flow_state *f;
	int got;
};

static long state_spin(__u32 i, void *data)
{
	struct spin_ctx *c = data;
	if (!c->f)
		return 1;
	c->got = state_trylock(c->f);
	return c->got != 0;
}

// state_lock takes f's lock: 1; 0 when LOCK_SPINS tries failed; -2 when
// the state moved.
static __always_inline int state_lock(struct flow_state *f, struct spin_ctx *c)
{
	int got = state_trylock(f);
	if (got)
		return got;
	c->f = f;
	c->got = 0;
	bpf_loop(LOCK_SPINS, state_spin, c, 0);
	return c->got;
}

// state_set_lock ends f's hold (its holder's) with the lock l.
static __always_inline void state_set_lock(struct flow_state *f, __u64 l)
{
	__sync_lock_test_and_set(&f->seen, (f->seen & ~(__u64)LOCK_MASK) | l);
}

static __always_inline void state_unlock(struct flow_state *f)
{
	state_set_lock(f, LOCK_FREE);
}

// state_copy copies the limiter's state and the seen time from s to f,
// f's lock as it is.
static __always_inline void state_copy(struct flow_state *f, struct flow_state *s)
{
	f->last = s->last;
	f->tokens = s->tokens;
	f->win = s->win;
	f->cur = s->cur;
	set_seen(f, seen_of(s));
}

// touch is what the flow table does to a flow's state f at now before its
// limiter sees the packet (shaper's table Get): a flow idle past the
// rule's timeout starts afresh; seen moves on.
static __always_inline void touch(struct rule_entry *r, struct flow_state *f, __s64 now)
{
	__s64 seen = seen_of(f);
	if (r->timeout > 0 && now - seen > r->timeout)
		reset(r, f, now);
	if (now > seen)
		set_seen(f, now);
}

// charge charges cost to the flow's state f at now (its lock held), need
// as allow's: 1 allowed, 0 over the limit.
static __always_inline int charge(struct rule_entry *r, struct flow_state *f, __s64 now, __s64 cost, int need)
{
	touch(r, f, now);
	return allow(r, f, now, cost, need);
}

// Verdicts of total_decide.
enum { TOT_KEY = 0, TOT_PASS = 1, TOT_OVER = 2 };

// total_decide is shaper's allowTotal for a packet of rule r (which
// charges a total) whose key's limiter, charged on a copy under the key's
// lock, said ok: the total's state under its own lock (taken second, held
// for the arithmetic only, so that no CPU ever waits for a key's lock while
// holding a total's). TOT_PASS: both allow, both charged (commit the key's
// copy); TOT_KEY: the key refused, the total put back as it was (commit the
// key's copy: its refill); TOT_OVER: the total refused (the key's copy
// not committed: a packet the total refuses costs its key nothing); -1
// the total's lock not had (user space decides).
static __always_inline int total_decide(struct rule_entry *r, int ok, __s64 now, __s64 tcost, int need, struct spin_ctx *c)
{
	if (need == NEED_OVER)
		return TOT_KEY; // refused at the datagram's first fragment: the total untouched
	__u32 ti = r->total;
	struct total *t = bpf_map_lookup_elem(&totals, &ti);
	if (!t)
		return -1;
	if (state_lock(&t->st, c) != 1)
		return -1;
	t->packets++;
	__s64 last = t->st.last, tokens = t->st.tokens;
	__u64 win = t->st.win, cur = t->st.cur;
	int v = TOT_PASS;
	if (!allow(&t->lim, &t->st, now, tcost, need)) {
		t->dropped++;
		v = TOT_OVER;
	} else if (!ok) {
		t->st.last = last;
		t->st.tokens = tokens;
		t->st.win = win;
		t->st.cur = cur;
		v = TOT_KEY;
	} else {
		t->accepted++;
	}
	state_unlock(&t->st);
	return v;
}

// charge_total is charge for a rule with a total (f's lock held): the key
// charged on a copy, committed unless the total refuses; -1 user space
// decides.
static __always_inline int charge_total(struct rule_entry *r, struct flow_state *f, __s64 now, __s64 cost, __s64 tcost, int need,
					struct spin_ctx *c)
{
	__u32 zero = 0;
	struct scratch *scr = bpf_map_lookup_elem(&scratch, &zero);
	if (!scr)
		return -1;
	touch(r, f, now);
	struct flow_state *k = &scr->kc;
	*k = *f;
	int v = total_decide(r, allow(r, k, now, cost, need), now, tcost, need, c);
	if (v < 0)
		return -1;
	if (v != TOT_OVER)
		state_copy(f, k);
	return v == TOT_PASS;
}

// flow_charge is charge under f's lock; -1 the lock not had (user space
// decides), -2 the state moved.
static __always_inline int flow_charge(struct rule_entry *r, struct flow_state *f, __s64 now, __s64 cost, __s64 tcost, int need,
				       struct spin_ctx *c)
{
	int got = state_lock(f, c);
	if (got != 1)
		return got == -2 ? -2 : -1;
	int ok;
	if (r->total == TOTAL_NONE)
		ok = charge(r, f, now, cost, need);
	else
		ok = charge_total(r, f, now, cost, tcost, need, c);
	state_unlock(f);
	return ok;
}

// flow_decide charges cost to key's flow of rule ri (entry r) at now: 1
// allowed, 0 over the limit, -1 user space decides (no flow map, no room,
// a lock not had). A flow is in the rule's flows map (one lookup: the
// common case), or in flows_new after one packet (the second moves its
// state, under its lock, to flows, and leaves a LOCK_MOVED marker that
// sends a late CPU there and keeps the key from starting afresh in
// flows_new while the marker lasts), or new (into flows_new, fresh). A
// marker whose flow flows has since evicted becomes the flow's fresh state
// again, as an evicted flow's next packet does.
static __always_inline int flow_new(struct rule_entry *r, void *main, void *small, struct flow_key *key, __s64 now, __s64 cost, __s64 tcost,
				    int need, struct rule_counters *cs, struct spin_ctx *c);

// flow_verdict is flow_decide for the flow key of rule ri, whose entry r
// and counters cs the entry point has looked up (not looked up again).
static __always_inline int flow_verdict(struct rule_entry *r, struct rule_counters *cs, __u32 ri, struct flow_key *key, __s64 now, __s64 cost,
					__s64 tcost, int need)
{
	if (!key || ri >= MAX_RULES || (__u64)now >> (64 - LOCK_BITS))
		return -1; // (a time the seen word cannot hold)
	struct spin_ctx sc = {};
	void *main = bpf_map_lookup_elem(&flows, &ri);
	if (!main)
		return -1; // the loader failed to give the rule its maps
	struct flow_state *f = bpf_map_lookup_elem(main, key);
	if (!f) {
		void *small = bpf_map_lookup_elem(&flows_new, &ri);
		if (!small)
			return -1;
		int v = flow_new(r, main, small, key, now, cost, tcost, need, cs, &sc);
		if (v != 2)
			return v;
		f = bpf_map_lookup_elem(main, key);
		if (!f)
			return -1;
	}
	int ok = flow_charge(r, f, now, cost, tcost, need, &sc);
	return ok == -2 ? -1 : ok;
}

// flow_new is flow_decide for a key flows does not hold: its verdict, or 2
// when the flow is in flows after all (moved meanwhile): charge it there.
static __always_inline int flow_new(struct rule_entry *r, void *main, void *small, struct flow_key *key, __s64 now, __s64 cost, __s64 tcost,
				    int need, struct rule_counters *cs, struct spin_ctx *c)
{
	__u32 zero = 0;
	struct scratch *scr = bpf_map_lookup_elem(&scratch, &zero);
	if (!scr)
		return -1;
	struct flow_state *nf = &scr->nf;
	int fresh = 0;
	struct flow_state *f = bpf_map_lookup_elem(small, key);
	if (!f) {
		__builtin_memset(nf, 0, sizeof(*nf));
		reset(r, nf, now);
		set_seen(nf, now);
		if (bpf_map_update_elem(small, key, nf, BPF_NOEXIST) == 0) {
			cs->c[C_INSERTS]++;
			fresh = 1;
		}
		f = bpf_map_lookup_elem(small, key);
		if (!f)
			return -1; // no room even after the LRU's eviction
	}
	int got = state_lock(f, c);
	if (got == -2) {
		if (bpf_map_lookup_elem(main, key))
			return 2;
		// Moved, then evicted from flows: the marker becomes the flow's
		// fresh state (one CPU turns it; another CPU's packet at that
		// instant goes to user space).
		__u64 w = *(volatile __u64 *)&f->seen;
		if ((w & LOCK_MASK) != LOCK_MOVED ||
		    __sync_val_compare_and_swap(&f->seen, w, (w & ~(__u64)LOCK_MASK) | LOCK_HELD) != w)
			return -1;
		reset(r, f, now);
		set_seen(f, now);
		cs->c[C_INSERTS]++;
		fresh = 1;
		got = 1;
	}
	if (got != 1)
		return -1;
	// Charged on a copy: a fresh flow's goes back in place; at a flow's
	// second packet it goes to flows, the state left here locked until
	// flows holds it, then saying where it went.
	*nf = *f;
	nf->seen &= ~(__u64)LOCK_MASK;
	int ok = charge(r, nf, now, cost, need);
	if (r->total != TOTAL_NONE) {
		int v = total_decide(r, ok, now, tcost, need, c);
		if (v < 0) {
			state_unlock(f);
			return -1;
		}
		if (v == TOT_OVER) {
			// Refused by the total: the key's state as the table
			// left it, its limiter uncharged.
			*nf = *f;
			nf->seen &= ~(__u64)LOCK_MASK;
			touch(r, nf, now);
		}
		ok = v == TOT_PASS;
	}
	if (fresh) {
		state_copy(f, nf);
		state_unlock(f);
		return ok;
	}
	if (bpf_map_update_elem(main, key, nf, BPF_NOEXIST) != 0) {
		// Already there (or no room): charge flows' own, if any.
		state_unlock(f);
		return 2;
	}
	state_set_lock(f, LOCK_MOVED);
	return ok;
}

#endif
