// SPDX-License-Identifier: (MIT OR GPL-2.0)
// A flow's state: found or made in its rule's map, changed by one CPU at a
// time.

#ifndef FASTPATH_FLOWSTATE_H
#define FASTPATH_FLOWSTATE_H

#include "common.h"
#include "limiter.h"

// The CPUs a key's packets arrive on take turns on its state, as shaper's
// one goroutine per engine does, under the state's own lock word (an LRU
// hash's values cannot hold a bpf_spin_lock): taken by compare-and-swap,
// released by an exchange (both full barriers), held for the few
// instructions of the limiter, never across a helper call. A tc program
// runs in softirq context and is not preempted while holding it, so the
// spin is short; LOCK_SPINS bounds it all the same.
#define LOCK_SPINS (1 << 16)

static __always_inline int state_trylock(struct flow_state *f)
{
	return __sync_val_compare_and_swap(&f->lock, 0, 1) == 0;
}

struct spin_ctx {
	struct flow_state *f;
	int got;
};

static long state_spin(__u32 i, void *data)
{
	struct spin_ctx *c = data;
	if (c->f && state_trylock(c->f)) {
		c->got = 1;
		return 1;
	}
	return 0;
}

// state_lock takes f's lock: 1, or 0 when LOCK_SPINS tries failed.
static __always_inline int state_lock(struct flow_state *f)
{
	if (state_trylock(f))
		return 1;
	struct spin_ctx c = {.f = f};
	bpf_loop(LOCK_SPINS, state_spin, &c, 0);
	return c.got;
}

static __always_inline void state_unlock(struct flow_state *f)
{
	__sync_lock_test_and_set(&f->lock, 0);
}

// flow_charge charges cost to the flow's state f at now under its lock: 1
// allowed, 0 over the limit, -1 the lock not had (user space decides).
static __always_inline int flow_charge(struct rule_entry *r, struct flow_state *f, __s64 now, __s64 cost, int need)
{
	if (!state_lock(f))
		return -1;
	if (r->timeout > 0 && now - f->seen > r->timeout)
		reset(r, f, now);
	if (now > f->seen)
		f->seen = now;
	int ok = allow(r, f, now, cost, need);
	state_unlock(f);
	return ok;
}

#endif
