package replay

import (
	"bytes"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// The connection tracker: replay's stand-in for the kernel's conntrack,
// which gives ct-state matches their state live. It follows the
// conversations of a capture, both directions of one as one entry, as the
// kernel does by default (nf_conntrack_tcp_loose aside, see CtStats):
//
//   - TCP: a SYN without ACK is new (a connection's first packet, or its
//     retransmission, or a port reused); every other packet of a known
//     connection is established; one of an unknown connection (a capture
//     started mid-connection, an entry evicted) is taken as established
//     and counted as picked up (the kernel, with nf_conntrack_tcp_loose=1,
//     gives that first packet new).
//   - UDP, ICMP echo and other protocols: a 5-tuple's packets are new until
//     the first packet the other way (the reply), established after, as
//     the kernel's IP_CT_NEW until IPS_SEEN_REPLY.
//   - An ICMP error about a tracked conversation is related; about none,
//     invalid.
//
// Entries expire after the kernel's default timeouts (nf_conntrack_*
// sysctls); the table holds at most max entries, the least recently seen
// evicted first. Nothing allocates per packet: entries live in a slice
// made once, found through a map sized once.
type tracker struct {
	idx   map[ctKey]int32
	ents  []ctEntry
	free  []int32
	head  int32 // most recently seen entry, -1: none
	tail  int32 // least recently seen
	max   int
	stats CtStats
	pkt   flows.Packet // the inner packet of an ICMP error
}

// CtStats counts what the tracker gave replayed packets, and where the
// capture may have made it differ from the kernel's conntrack.
type CtStats struct {
	// New, Established, Related, Invalid: packets given each state.
	New, Established, Related, Invalid uint64
	// PickedUp: TCP packets of a connection whose opening the capture
	// does not hold (started mid-connection, or its entry evicted or
	// expired), taken as established. The kernel (nf_conntrack_tcp_loose
	// = 1, its default) gives the first of each new.
	PickedUp uint64
	// OneWay: conversations whose entry ended (expired, evicted, or at
	// the end) with packets one way only: a capture of one direction
	// (asymmetric routing, a filter) makes every packet of them new,
	// where the kernel, seeing replies, would say established.
	OneWay uint64
	// Evicted: entries pushed out of a full table (Options.ConntrackMax).
	Evicted uint64
}

// ctKey is a conversation: its two ends in a canonical order.
type ctKey struct {
	a, b   [16]byte
	pa, pb uint16
	proto  uint8
	v6     bool
}

type ctEntry struct {
	key ctKey
	// orig: the originator is key's a end.
	orig bool
	// replied: a packet came the other way; tcp: a TCP entry; closing:
	// a FIN or RST was seen.
	replied, tcp, closing bool
	last                  int64
	prev, next            int32
}

// The kernel's default timeouts (net.netfilter.nf_conntrack_*), ns.
const (
	ctTCPSynSent     = 120e9
	ctTCPEstablished = 432000e9
	ctTCPClose       = 120e9 // time_wait; close and last_ack are shorter
	ctUDP            = 30e9
	ctUDPStream      = 120e9
	ctICMP           = 30e9
	ctGeneric        = 600e9
)

func newTracker(max int) *tracker {
	if max < 1 {
		max = 1
	}
	t := &tracker{idx: make(map[ctKey]int32, max), ents: make([]ctEntry, 0, max), free: make([]int32, 0, max), head: -1, tail: -1, max: max}
	return t
}

// timeout is how long e lives after its last packet.
func (e *ctEntry) timeout() int64 {
	switch {
	case e.tcp && e.closing:
		return ctTCPClose
	case e.tcp && e.replied:
		return ctTCPEstablished
	case e.tcp:
		return ctTCPSynSent
	case e.key.proto == flows.ProtoUDP || e.key.proto == flows.ProtoUDPLite:
		if e.replied {
			return ctUDPStream
		}
		return ctUDP
	case e.key.proto == flows.ProtoICMP || e.key.proto == flows.ProtoICMPv6:
		return ctICMP
	}
	return ctGeneric
}

// keyOf is p's conversation, and whether p goes from key's a end.
func keyOf(p *flows.Packet) (k ctKey, fromA bool) {
	k.proto, k.v6 = p.Proto, p.Class == flows.IPv6
	sp, dp := p.SrcPort, p.DstPort
	c := bytes.Compare(p.Src[:], p.Dst[:])
	if c < 0 || c == 0 && sp <= dp {
		k.a, k.b, k.pa, k.pb = p.Src, p.Dst, sp, dp
		return k, true
	}
	k.a, k.b, k.pa, k.pb = p.Dst, p.Src, dp, sp
	return k, false
}

// state gives packet p (decoded from ip) its connection state at now, and
// tracks it.
func (t *tracker) state(p *flows.Packet, ip []byte, now int64) shaper.CtState {
	if p.Class == flows.Malformed {
		t.stats.Invalid++
		return shaper.CtInvalid
	}
	if (p.Proto == flows.ProtoICMP || p.Proto == flows.ProtoICMPv6) && p.HasL4 && isICMPError(p.ICMPType, p.Class == flows.IPv6) {
		return t.icmpError(p, ip, now)
	}
	k, fromA := keyOf(p)
	i, ok := t.idx[k]
	if ok && now-t.ents[i].last > t.ents[i].timeout() {
		t.drop(i)
		ok = false
	}
	syn := p.Proto == flows.ProtoTCP && p.HasL4 && p.TCPFlags&(flows.TCPSyn|flows.TCPAck) == flows.TCPSyn
	if !ok {
		i = t.add(k, fromA, now)
		e := &t.ents[i]
		e.tcp = p.Proto == flows.ProtoTCP
		if e.tcp && !syn {
			// The capture holds no opening: taken as established.
			e.replied = true
			t.stats.PickedUp++
			t.stats.Established++
			t.flags(e, p)
			return shaper.CtEstablished
		}
		t.stats.New++
		return shaper.CtNew
	}
	e := &t.ents[i]
	e.last = now
	t.touch(i)
	if syn {
		// A retransmitted SYN, or a port reused: a new connection.
		e.orig, e.replied, e.closing = fromA, false, false
		t.stats.New++
		return shaper.CtNew
	}
	if fromA != e.orig {
		e.replied = true
	}
	t.flags(e, p)
	if !e.replied {
		t.stats.New++
		return shaper.CtNew
	}
	t.stats.Established++
	return shaper.CtEstablished
}

func (t *tracker) flags(e *ctEntry, p *flows.Packet) {
	if e.tcp && p.HasL4 && p.TCPFlags&(flows.TCPFin|flows.TCPRst) != 0 {
		e.closing = true
	}
}

// isICMPError reports whether an ICMP (v6: ICMPv6) type is an error
// message, which carries the packet it is about.
func isICMPError(typ uint8, v6 bool) bool {
	if v6 {
		return typ < 128
	}
	switch typ {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}

// icmpError: an ICMP error about a tracked conversation is related, else
// invalid. The packet it quotes starts 8 bytes into the ICMP header (found
// here without extension headers).
func (t *tracker) icmpError(p *flows.Packet, ip []byte, now int64) shaper.CtState {
	off := 40
	if p.Class == flows.IPv4 {
		off = int(ip[0]&0x0f) * 4
	}
	if len(ip) >= off+8+20 {
		t.pkt.Decode(ip[off+8:])
		if t.pkt.Class != flows.Malformed {
			k, _ := keyOf(&t.pkt)
			if i, ok := t.idx[k]; ok && now-t.ents[i].last <= t.ents[i].timeout() {
				t.stats.Related++
				return shaper.CtRelated
			}
		}
	}
	t.stats.Invalid++
	return shaper.CtInvalid
}

// add makes an entry for k, evicting the least recently seen when full.
func (t *tracker) add(k ctKey, fromA bool, now int64) int32 {
	if len(t.idx) >= t.max {
		t.stats.Evicted++
		t.drop(t.tail)
	}
	var i int32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.ents = append(t.ents, ctEntry{})
		i = int32(len(t.ents) - 1)
	}
	t.ents[i] = ctEntry{key: k, orig: fromA, last: now, prev: -1, next: t.head}
	if t.head >= 0 {
		t.ents[t.head].prev = i
	}
	t.head = i
	if t.tail < 0 {
		t.tail = i
	}
	t.idx[k] = i
	return i
}

// unlink takes entry i out of the recency list.
func (t *tracker) unlink(i int32) {
	e := &t.ents[i]
	if e.prev >= 0 {
		t.ents[e.prev].next = e.next
	} else {
		t.head = e.next
	}
	if e.next >= 0 {
		t.ents[e.next].prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

// touch makes entry i the most recently seen.
func (t *tracker) touch(i int32) {
	if t.head == i {
		return
	}
	t.unlink(i)
	e := &t.ents[i]
	e.next = t.head
	if t.head >= 0 {
		t.ents[t.head].prev = i
	}
	t.head = i
	if t.tail < 0 {
		t.tail = i
	}
}

// drop forgets entry i (counted as one way if it never saw a reply).
func (t *tracker) drop(i int32) {
	e := &t.ents[i]
	if !e.replied {
		t.stats.OneWay++
	}
	t.unlink(i)
	delete(t.idx, e.key)
	t.free = append(t.free, i)
}

// Stats are the counts so far, with the entries still held that never saw
// a reply counted one way.
func (t *tracker) Stats() CtStats {
	s := t.stats
	for i := t.head; i >= 0; i = t.ents[i].next {
		if !t.ents[i].replied {
			s.OneWay++
		}
	}
	return s
}
