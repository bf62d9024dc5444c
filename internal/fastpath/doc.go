// Package fastpath runs the rules of a policy that the kernel can enforce
// inside an eBPF tc classifier (bpf/fastpath.c), with the same rule order,
// first-match semantics and integer arithmetic as package shaper, and hands
// every other packet on to the NFQUEUE path.
//
// Compile splits a policy: accept and drop rules, and limit rules with the
// token bucket, the fixed window or the sliding-window counter, run in the
// kernel; shaping, the sliding-window log, global rules and matches the
// program cannot evaluate (oif, queue, more than 4 port ranges or input
// interfaces per rule) stay in user space, and a limit rule after a rule
// whose match the program can only approximate stays there too, so that no
// key ever has a bucket on both paths. Each rule gets one Reason line: the
// basis of `check`'s "which rules run where".
//
// The program decodes IPv4/IPv6 (up to 32 IPv6 extension headers) behind
// an Ethernet header, or at offset 0 on an L3 device (two entry points:
// Program.ProgFor picks one by the link type), and the transport ports as
// package flows does; it charges a GSO/GRO packet its segments, and decides
// a datagram's later fragments as its first fragment (bpf/frag.h); it keys
// flows as
// flows.KeyConfig does, and keeps each limit rule's flows in its own LRU
// map of the rule's max-flows (so the key holds no rule: a reload that keeps
// the rule keeps its maps, wherever the rule moves), behind a map of new
// flows of the same size (at least 128) that a flow's first packet enters
// and its second leaves for the main map with its state, so that one-packet
// flows (a spoofed flood) evict only each other, as S3-FIFO's small queue
// does in user space. A flow's element is 128 bytes (a 40-byte key, a
// 40-byte state, the kernel's 48-byte header: two cache lines). A key's
// state changes under its own lock (compare-and-swap of the word that
// holds the lock's bits and the flow's seen time), so the CPUs share one
// bucket per key. Packets it cannot decide — malformed IP
// headers, IPv6 packets with a longer extension header chain, packets of
// user-space rules — it passes with the punt mark (Spec.PuntMark) or'ed
// into skb->mark. The program is
// attached at tc ingress (Attach, attach.go: a tcx link, or a clsact qdisc
// and a cls_bpf filter where the kernel has no tcx), before netfilter, so
// the divert rule sees that mark: in the iptables divert chain, match it before the NFQUEUE rule,
//
//	iptables -t mangle -A PREROUTING -m mark --mark 0x40000000/0x40000000 -j NFQUEUE --queue-num 0 --queue-bypass
//
// and send nothing else to the queue. Packets the program decided carry no
// punt mark and never reach the queue. The daemon runs it with
// packetshaper --fastpath IFACE (internal/daemon/fastpath_linux.go,
// docs/fastpath.md); scripts/rules.sh add --fastpath writes that rule.
//
// Time: the program reads bpf_ktime_get_boot_ns() plus an offset the
// loader sets (the Unix time at boot, read once per process, so that a
// wall-clock step never moves the kernel's time base), so that windows
// align to the Unix epoch as in shaper; a test sets the config's now
// instead, per packet.
//
// The C enums (bpf/common.h: actions, algorithms, key modes, over-limit
// actions, counters) reach Go as bpf2go's constants from the object's BTF;
// a kernel flow's Left is shaper.Limiter.Left of shaper.StateOf its fields.
package fastpath
