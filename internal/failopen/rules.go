package failopen

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// QueueRule is one nf_tables rule that sends packets to NFQUEUE: an
// iptables-nft rule with the NFQUEUE target (xt compat) or an nft rule with
// a queue statement. iptables-legacy rules are not nf_tables rules and are
// never listed.
type QueueRule struct {
	Family string // nf_tables family: ip, ip6, inet, arp, bridge, netdev
	Table  string
	Chain  string
	Handle uint64 // the rule's handle, unique in its table
	// Queue is the first queue and Queues the number of queues the rule
	// spreads packets over (--queue-balance Queue:Queue+Queues-1, or
	// "queue num Queue-..."); Queues is 1 for a single queue. Both are
	// valid iff Computed is false.
	Queue, Queues uint16
	// Computed: the queue number comes from an expression ("queue to"),
	// or from an NFQUEUE target revision this package does not know.
	Computed bool
	// Bypass: when no process has bound the queue, packets are accepted
	// (--queue-bypass, "bypass"); without it they are dropped.
	Bypass bool
	// Fanout: the queue is chosen by CPU, not by flow hash
	// (--queue-cpu-fanout, "fanout").
	Fanout bool
	// Xt: an iptables-nft rule (xt NFQUEUE target), rather than nft.
	Xt bool
	// HasCounter: the rule counts the packets that reach its queue
	// statement (iptables-nft rules always do; nft rules with "counter"
	// before "queue"). Packets is valid iff HasCounter.
	HasCounter bool
	Packets    uint64
}

// Covers reports whether the rule can send packets to queue q.
func (r QueueRule) Covers(q uint16) bool {
	return !r.Computed && q >= r.Queue && uint32(q) < uint32(r.Queue)+uint32(r.Queues)
}

// String names the rule as nft does: "ip filter OUTPUT handle 4".
func (r QueueRule) String() string {
	return fmt.Sprintf("%s %s %s handle %d", r.Family, r.Table, r.Chain, r.Handle)
}

// key identifies a rule across readings.
func (r QueueRule) key() ruleKey {
	return ruleKey{r.Family, r.Table, r.Chain, r.Handle}
}

type ruleKey struct {
	family, table, chain string
	handle               uint64
}

func (k ruleKey) String() string {
	return fmt.Sprintf("%s %s %s handle %d", k.family, k.table, k.chain, k.handle)
}

// familyName is the nft name of an nf_tables family (NFPROTO_*).
func familyName(f byte) string {
	switch f {
	case 1:
		return "inet"
	case 2:
		return "ip"
	case 3:
		return "arp"
	case 5:
		return "netdev"
	case 7:
		return "bridge"
	case 10:
		return "ip6"
	}
	return fmt.Sprintf("family%d", f)
}

// Flags of struct xt_NFQ_info_v3 (linux/netfilter/xt_NFQUEUE.h).
const (
	xtNFQFlagBypass    = 0x01
	xtNFQFlagCPUFanout = 0x02
)

// decodeXtNFQ decodes the info of an xt NFQUEUE target of revision rev
// into r. The structs are in host byte order:
//
//	v0: struct xt_NFQ_info    { __u16 queuenum; }
//	v1: struct xt_NFQ_info_v1 { __u16 queuenum; __u16 queues_total; }
//	v2: struct xt_NFQ_info_v2 { __u16 queuenum; __u16 queues_total; __u16 bypass; }
//	v3: struct xt_NFQ_info_v3 { __u16 queuenum; __u16 queues_total; __u16 flags; }
//
// An unknown revision or a short info leaves r.Computed set.
func decodeXtNFQ(rev uint32, info []byte, r *QueueRule) {
	ne := binary.NativeEndian
	need := map[uint32]int{0: 2, 1: 4, 2: 6, 3: 6}[rev]
	if rev > 3 || len(info) < need {
		r.Computed = true
		return
	}
	r.Queue, r.Queues = ne.Uint16(info), 1
	if rev >= 1 {
		r.Queues = max(ne.Uint16(info[2:]), 1)
	}
	switch rev {
	case 2:
		r.Bypass = ne.Uint16(info[4:]) != 0
	case 3:
		f := ne.Uint16(info[4:])
		r.Bypass = f&xtNFQFlagBypass != 0
		r.Fanout = f&xtNFQFlagCPUFanout != 0
	}
}

// UnservedQueue is a rule's queues that no process has bound.
type UnservedQueue struct {
	Rule   QueueRule
	Queues []uint16 // ascending
}

// String is the hint to log, e.g. "rule ip filter INPUT handle 7 sends to
// queue 3, which nobody serves: its packets pass unlimited (bypass)".
func (u UnservedQueue) String() string {
	what := "its packets are dropped (no bypass)"
	if u.Rule.Bypass {
		what = "its packets pass unlimited (bypass)"
	}
	which := "queue " + queueList(u.Queues) + ", which nobody serves"
	if len(u.Queues) > 1 {
		which = "queues " + queueList(u.Queues) + ", which nobody serves"
	}
	if u.Rule.Queues > 1 && len(u.Queues) < int(u.Rule.Queues) {
		what = "the packets it balances to them " + strings.TrimPrefix(what, "its packets ")
	}
	return fmt.Sprintf("rule %s sends to %s: %s", u.Rule, which, what)
}

// queueList formats ascending queue numbers with ranges: "0-3,7".
func queueList(qs []uint16) string {
	var b strings.Builder
	for i := 0; i < len(qs); {
		j := i
		for j+1 < len(qs) && qs[j+1] == qs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", qs[i], qs[j])
		} else {
			fmt.Fprintf(&b, "%d", qs[i])
		}
		i = j + 1
	}
	return b.String()
}

// UnservedQueues returns, for each rule, the queues it sends to that are
// not in bound (the queues bound by any process: BoundQueues). Rules whose
// queue is Computed are left out. Packets sent to such a queue are accepted
// unshaped if the rule has bypass, dropped otherwise: worth a hint at
// startup when packetshaper serves other queues (call it after binding
// yours).
func UnservedQueues(rules []QueueRule, bound []uint16) []UnservedQueue {
	var out []UnservedQueue
	for _, r := range rules {
		if r.Computed {
			continue
		}
		var qs []uint16
		for i := uint32(0); i < uint32(r.Queues); i++ {
			q := uint16(uint32(r.Queue) + i)
			if !slices.Contains(bound, q) {
				qs = append(qs, q)
			}
			if uint32(r.Queue)+i == 0xffff {
				break
			}
		}
		if len(qs) > 0 {
			out = append(out, UnservedQueue{Rule: r, Queues: qs})
		}
	}
	return out
}
