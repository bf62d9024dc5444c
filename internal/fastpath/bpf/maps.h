// SPDX-License-Identifier: (MIT OR GPL-2.0)
// The program's maps, and the counters' helper.

#ifndef FASTPATH_MAPS_H
#define FASTPATH_MAPS_H

#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfg);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule_entry);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} src_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} dst_cidrs SEC(".maps");

// flows holds, for each limit rule, an LRU map of its flows of the rule's
// own max-flows (the loader makes them; the kernel's check of an inner
// hash map does not compare sizes), so that a rule's flood evicts only that
// rule's flows; flows_new, an LRU map of the same size where a flow's first
// packet puts it, the flow moving to flows with its state at its second
// (flowstate.h), as S3-FIFO's small queue does in user space: flows that
// send one packet (a spoofed flood) evict each other there, never a flow
// of flows.
struct inner_flows {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	// Sizes, not types: clang leaves the types of a map only reached
	// through the outer map's declaration as forward declarations.
	__uint(key_size, sizeof(struct flow_key));
	__uint(value_size, sizeof(struct flow_state));
};

// The flow types in BTF, for bpf2go's Go types (as cilium/ebpf's examples
// force a type into the ELF).
const struct flow_key *unused_flow_key __attribute__((unused));
const struct flow_state *unused_flow_state __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__array(values, struct inner_flows);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__array(values, struct inner_flows);
} flows_new SEC(".maps");

// totals: the class totals of kernel rules (index: rule_entry.total),
// filled by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TOTALS);
	__type(key, __u32);
	__type(value, struct total);
} totals SEC(".maps");

// scratch: a flow key and state per CPU, off the stack (the entry
// point's and flow_verdict's stacks share 512 bytes).
struct scratch {
	struct flow_key key;
	struct flow_state nf;
	struct flow_state kc; // a key's state charged apart from its total's (flowstate.h)
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_RULES + 1);
	__type(key, __u32);
	__type(value, struct rule_counters);
} counters SEC(".maps");

static __always_inline void count(__u32 i, int c)
{
	struct rule_counters *cs = bpf_map_lookup_elem(&counters, &i);
	if (cs && c >= 0 && c < C_N)
		cs->c[c]++;
}

// count2 is two counts of counters[i] in one lookup.
static __always_inline void count2(__u32 i, int a, int b)
{
	struct rule_counters *cs = bpf_map_lookup_elem(&counters, &i);
	if (!cs)
		return;
	if (a >= 0 && a < C_N)
		cs->c[a]++;
	if (b >= 0 && b < C_N)
		cs->c[b]++;
}

#endif
