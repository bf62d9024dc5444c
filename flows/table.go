package flows

import (
	"math/bits"
	"unsafe"
)

// Table is a bounded map from Key to per-flow state V, with idle expiry and
// S3-FIFO eviction (Yang et al., "FIFO queues are all you need for cache
// eviction", SOSP 2023). It is what keeps packetshaper's memory bounded
// whatever the traffic, without letting a flood of new flows push out the
// flows that keep sending.
//
// Flows sit in one of two FIFO queues: small, where new flows enter, of at
// most s = max(1, Max/10) flows, and main, for flows seen again. Each flow
// has a counter of 0 to 3: a packet of a held flow adds one and moves
// nothing. When a flow is created in a full table (and no idle flow could
// be reclaimed, below), one flow is evicted:
//   - while small holds s flows, its oldest flow leaves it: if it had a
//     packet since it entered, it moves to main's head with its counter at
//     0; if not, it is evicted and its key's fingerprint goes into the
//     ghost, a direct-mapped array of 32-bit fingerprints (Max slots
//     rounded up to a power of two);
//   - once small holds fewer, the clock hand takes main's tail: a flow with
//     counter > 0 goes back to main's head with the counter less one, one
//     with 0 is evicted.
//
// A new flow whose key is in the ghost enters main. While the table is not
// full, a flow entering a small of s flows moves small's oldest on to main
// whatever its counter, so that small always holds the newest flows that
// entered it.
//
// Contract:
//   - At most Max flows are held. A packet of a new flow when the table is
//     full evicts a flow (counted in Evictions); it never fails and never
//     refuses the new flow. The evicted flow's state is forgotten: if it
//     comes back it starts afresh, as a new flow would. (Kernel hashlimit
//     instead fails to match when its table is full, and nft meters stop
//     adding; both silently stop limiting new flows.)
//   - A new flow is evicted from small only after about s more flows have
//     been created, and only if it sent no second packet in that time; with
//     one, it moves to main. If it was evicted and its next packet finds its
//     fingerprint still in the ghost (after k more evictions from small it
//     is there with probability about e^(-k/slots)), it starts afresh once,
//     in main.
//   - Main evicts only while it holds more than Max-s flows, which only a
//     flow entering main brings about: one that moves up from small (it had
//     a second packet) or returns through the ghost. So flows that send one
//     packet, however many, never push out a flow that had a second packet
//     while held: under such a flood a flow in main stays until it goes
//     idle. (The exception is a new key matching a fingerprint in the ghost
//     by chance, about one new flow in 2^31, which senders cannot choose
//     because the hash is seeded; each costs one step of the hand.)
//   - A flow in main is evicted only when the hand finds it with its counter
//     at 0, that is when it had no packet since the hand last passed it (or
//     since it entered main). Between two passes the hand takes as many
//     steps as main holds flows, at least Max-s-1 when the table is full,
//     and each step is paid for by a packet that is not its flow's first:
//     an eviction by a flow entering main (its second packet in small, or
//     its return through the ghost), a reinsertion by a packet to a flow in
//     main (a flow banks up to three). So a flow that sends at least once
//     per Max-s such packets of other flows is never evicted: against
//     spoofed sources that send two packets each to reach main, at least
//     once per Max-s sources (every 100 ms for Max = 10000 against 90 000
//     sources a second).
//   - A flow not seen for more than Timeout nanoseconds is idle: it is
//     treated as new on its next packet (counted in Expired; it keeps its
//     place, its counter back at 0). Up to two idle flows at the queues'
//     tails are reclaimed each time a flow is created, and an idle flow that
//     eviction comes across is reclaimed rather than moved (both counted in
//     Expired): idle flows at the tails go before any live flow is evicted.
//     An idle flow deeper in a queue waits for its turn at the tail.
//   - Cost: a packet of a held flow reads an index slot and its entry and
//     writes the entry; no queue moves. Creating a flow costs O(1)
//     amortized: each step of the hand that does not evict uses up a
//     counter, that is an earlier packet. One call may take up to 3×Max
//     steps, after every flow in main had three packets: those packets
//     paid for it.
//   - Time is an argument: now is nanoseconds since the Unix epoch, as the
//     caller's clock or the capture says. A flow's last-seen time never moves
//     backwards.
//
// Memory: an entry per flow (the key, the last-seen time, a queue link and
// the counter in 56 bytes, then V), allocated in chunks of 4096 entries as
// the table grows and never moved or copied; two 8-byte index slots per
// flow at the cap (the index doubles as it grows: what it leaves behind
// adds up to less than its final size); 4 to 8 bytes of ghost per flow,
// allocated when the table first fills. A table at its cap allocates
// nothing more. Not safe for concurrent use.
type Table[V any] struct {
	// What a hit reads comes first, to share cache lines.
	idx     index
	chunks  [][]entry[V] // entry i is chunks[i>>chunkBits][i&chunkMask]
	timeout int64
	// alt, when set, is the index in idx's place (idx then stays empty
	// but for its seed, which the ghost's hash still uses). Only tests
	// set it: BenchmarkTableIndex's Go map. Get pays one nil check for it.
	alt altIndex

	max     int
	sTarget int   // small's target size
	n       int32 // entries handed out from chunks
	small   fifo
	main    fifo
	// free lists slots of reclaimed idle flows, chained through next.
	free int32

	// ghost holds fingerprints of keys evicted from small, at a position
	// taken from their hash; 0 is empty. Nil until the table first fills.
	ghost []uint32
	gmask uint64

	evictions, expired uint64
}

type entry[V any] struct {
	key  Key
	last int64 // newest packet time
	// next is the next newer entry in its queue (none at the head), or the
	// next free slot.
	next int32
	// freq counts packets since the flow entered its queue or the hand
	// last passed it, up to maxFreq; freed marks a slot on the free list.
	freq uint8
	val  V
}

// fifo is a queue of entries linked from its tail (oldest) towards its
// head (newest).
type fifo struct {
	head, tail int32
	n          int
}

const (
	none      = -1
	maxFreq   = 3
	freed     = 0xff // freq of a slot on the free list (At skips it)
	chunkBits = 12
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
	// firstChunk is the first chunk's starting length.
	firstChunk = 64
)

// DefaultMaxFlows is what NewTable uses for max <= 0.
const DefaultMaxFlows = 65536

// MaxMaxFlows is the largest cap a table takes.
const MaxMaxFlows = 1 << 30

// NewTable returns a table of at most maxFlows flows (DefaultMaxFlows if
// maxFlows <= 0, at most MaxMaxFlows) that expires flows idle for more than
// timeout nanoseconds (never, if timeout <= 0).
func NewTable[V any](maxFlows int, timeout int64) *Table[V] {
	if maxFlows <= 0 {
		maxFlows = DefaultMaxFlows
	}
	maxFlows = min(maxFlows, MaxMaxFlows)
	// The first chunk starts small and doubles up to a full chunk (a
	// policy's many rules each have a table, mostly small ones); copying
	// it costs at most a chunk once. Later chunks are whole and never
	// copied.
	hint := min(maxFlows, firstChunk)
	nchunks := (maxFlows + chunkLen - 1) / chunkLen
	t := &Table[V]{
		max:     maxFlows,
		timeout: timeout,
		sTarget: max(1, maxFlows/10),
		idx:     newIndex(hint, maxFlows),
		chunks:  make([][]entry[V], 1, nchunks),
		small:   fifo{none, none, 0},
		main:    fifo{none, none, 0},
		free:    none,
	}
	// The first chunk comes with the first flow: a policy of thousands
	// of rules pays for the tables its traffic uses.
	return t
}

// ent returns entry i.
func (t *Table[V]) ent(i int32) *entry[V] {
	return &t.chunks[uint32(i)>>chunkBits][uint32(i)&chunkMask]
}

// lookup returns k's index slot and entry, or, if k is absent, the empty
// slot where it goes and nil.
func (t *Table[V]) lookup(k *Key, h uint64) (uint64, *entry[V]) {
	x := &t.idx
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return i, nil
		}
		if uint32(s>>32) == uint32(h) {
			if e := t.ent(int32(s) - 1); e.key.equal(k) {
				return i, e
			}
		}
	}
}

// Get returns the state of flow k at time now, creating it if absent.
// fresh reports that the flow is new (absent, evicted or expired before
// this packet): *v then holds whatever the slot's previous occupant left in
// it (the zero V for a never-used slot) and the caller must reset it. Slots
// are reused so that state holding buffers (a sliding-window log) can keep
// them.
//
// The returned pointer is valid until the next call to Get.
func (t *Table[V]) Get(k *Key, now int64) (v *V, fresh bool) {
	if t.alt != nil {
		return t.altGet(k, now)
	}
	h := t.idx.hash(k)
	// lookup, written out: the compiler does not inline it.
	x := &t.idx
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return t.insert(k, h, now), true
		}
		if uint32(s>>32) != uint32(h) {
			continue
		}
		e := t.ent(int32(s) - 1)
		if !e.key.equal(k) {
			continue
		}
		return &e.val, t.hit(e, now)
	}
}

// hit counts a packet of the flow of e at time now and reports whether
// the flow was idle past the timeout (fresh).
func (t *Table[V]) hit(e *entry[V], now int64) (fresh bool) {
	if t.timeout > 0 && now-e.last > t.timeout {
		t.expired++
		e.freq = 0
		fresh = true
	} else if e.freq < maxFreq {
		e.freq++
	}
	if now > e.last {
		e.last = now
	}
	return fresh
}

// altGet is Get over t.alt: its lookup in place of the probe (no hash on
// a hit; a new flow hashes for the ghost), the rest the same.
func (t *Table[V]) altGet(k *Key, now int64) (v *V, fresh bool) {
	i, ok := t.alt.get(*k)
	if !ok {
		return t.insert(k, t.idx.hash(k), now), true
	}
	e := t.ent(i)
	return &e.val, t.hit(e, now)
}

// insert adds flow k, of hash h, at time now.
func (t *Table[V]) insert(k *Key, h uint64, now int64) *V {
	// Look in the ghost before alloc, which may write over the fingerprint.
	q := &t.small
	if t.ghostTake(h) {
		q = &t.main
	}
	i := t.alloc(now)
	if q == &t.small && t.small.n >= t.sTarget {
		// There was room, and small is at its target: its oldest flow
		// moves on to main, as it would were the table full (but is not
		// evicted if it had no second packet: there is room for both).
		// So small is a FIFO of the newest flows whether the table is full
		// or not. (If small took every flow until the table filled, the
		// first eviction would move most of them to main at once, with no
		// packets to their credit, and the hand would pass over them in
		// the same call.)
		j, e := t.pop(&t.small)
		e.freq = 0
		t.push(&t.main, j, e)
	}
	if t.alt != nil {
		t.alt.put(*k, i)
	} else {
		if t.idx.full() {
			t.idx.grow()
		}
		// alloc may have removed keys, and grow moved everything: look
		// again.
		slot, _ := t.lookup(k, h)
		t.idx.put(slot, h, i)
	}
	e := t.ent(i)
	e.key, e.last, e.freq = *k, now, 0
	t.push(q, i, e)
	return &e.val
}

// idle reports whether e has not been seen for more than the timeout.
func (t *Table[V]) idle(e *entry[V], now int64) bool {
	return t.timeout > 0 && now-e.last > t.timeout
}

// alloc returns a slot for a new flow: a reclaimed idle one, a new one
// while under the cap, else an evicted flow's.
func (t *Table[V]) alloc(now int64) int32 {
	// Reclaim a couple of idle flows from the queues' tails each time a
	// flow is created: bounded work per packet, and idle flows go before
	// live ones.
	for n := 0; n < 2 && t.timeout > 0; n++ {
		q := &t.small
		if q.n == 0 || !t.idle(t.ent(q.tail), now) {
			q = &t.main
			if q.n == 0 || !t.idle(t.ent(q.tail), now) {
				break
			}
		}
		i, e := t.pop(q)
		t.drop(i, e)
		t.expired++
		e.next, e.freq = t.free, freed
		t.free = i
	}
	if t.free != none {
		i := t.free
		t.free = t.ent(i).next
		return i
	}
	if int(t.n) < t.max {
		i := t.n
		if c := int(i >> chunkBits); c == len(t.chunks) {
			t.chunks = append(t.chunks, make([]entry[V], min(chunkLen, t.max-int(i))))
		} else if c == 0 && int(i) == len(t.chunks[0]) {
			// Entries are reached by index, never kept by pointer
			// across calls (Get's pointer is valid until the next
			// one), so the first chunk may move.
			grown := make([]entry[V], min(max(2*len(t.chunks[0]), firstChunk), chunkLen, t.max))
			copy(grown, t.chunks[0])
			t.chunks[0] = grown
		}
		t.n++
		return i
	}
	return t.evict(now)
}

// evict frees a slot in a full table, as the type's comment says.
func (t *Table[V]) evict(now int64) int32 {
	if t.ghost == nil {
		g := 1 << bits.Len(uint(t.max-1))
		t.ghost = make([]uint32, g)
		t.gmask = uint64(g - 1)
	}
	for {
		// From small while it is at its target or over; else the table
		// is full and small below its target: main is not empty.
		fromSmall := t.small.n >= t.sTarget
		q := &t.main
		if fromSmall {
			q = &t.small
		}
		i, e := t.pop(q)
		if t.idle(e, now) {
			t.drop(i, e)
			t.expired++
			return i
		}
		if e.freq > 0 {
			// Seen again: small's entry moves to main, main's goes round
			// once more with one less.
			if fromSmall {
				e.freq = 0
			} else {
				e.freq--
			}
			t.push(&t.main, i, e)
			continue
		}
		if h := t.drop(i, e); fromSmall {
			t.ghostPut(h)
		}
		t.evictions++
		return i
	}
}

// drop takes entry i, e, out of the index and returns its key's hash.
func (t *Table[V]) drop(i int32, e *entry[V]) uint64 {
	h := t.idx.hash(&e.key)
	if t.alt != nil {
		t.alt.remove(e.key)
		return h
	}
	t.idx.remove(h, i)
	return h
}

// push adds entry i, e, at q's head.
func (t *Table[V]) push(q *fifo, i int32, e *entry[V]) {
	e.next = none
	if q.head != none {
		t.ent(q.head).next = i
	} else {
		q.tail = i
	}
	q.head = i
	q.n++
}

// pop takes the entry at q's tail; q must not be empty.
func (t *Table[V]) pop(q *fifo) (int32, *entry[V]) {
	i := q.tail
	e := t.ent(i)
	q.tail = e.next
	if q.tail == none {
		q.head = none
	}
	q.n--
	return i, e
}

// The ghost's position for a key comes from the high half of its hash, the
// fingerprint from the low half (with the low bit set: 0 is empty).

func (t *Table[V]) ghostPut(h uint64) { t.ghost[(h>>32)&t.gmask] = uint32(h) | 1 }

// ghostTake reports whether h's fingerprint is in the ghost, and removes it.
func (t *Table[V]) ghostTake(h uint64) bool {
	if t.ghost == nil {
		return false
	}
	p := &t.ghost[(h>>32)&t.gmask]
	if *p != uint32(h)|1 {
		return false
	}
	*p = 0
	return true
}

// Len is the number of flows held, idle ones not yet reclaimed included.
func (t *Table[V]) Len() int {
	if t.alt != nil {
		return t.alt.len()
	}
	return t.idx.n
}

// MaxBytes is what the table takes when full: its entries, its index at
// its largest and its ghost. A per-flow state holding buffers (a
// sliding-window log) adds those.
func (t *Table[V]) MaxBytes() uint64 {
	var e entry[V]
	return uint64(t.max)*uint64(unsafe.Sizeof(e)) + uint64(t.idx.limit)*8 + uint64(1<<bits.Len(uint(t.max-1)))*4
}

// Max is the table's cap.
func (t *Table[V]) Max() int { return t.max }

// Evictions counts live flows evicted because the table was full.
func (t *Table[V]) Evictions() uint64 { return t.evictions }

// Expired counts flows that were found idle for longer than the timeout:
// on their next packet, or when reclaimed.
func (t *Table[V]) Expired() uint64 { return t.expired }

// Timeout is the idle time after which a flow is treated as new (0 or
// less: never).
func (t *Table[V]) Timeout() int64 { return t.timeout }

// Slots is the number of entry slots handed out so far, the bound of At's
// index: it only grows, up to Max.
func (t *Table[V]) Slots() int { return int(t.n) }

// At returns the flow held in entry slot i, 0 <= i < Slots(): its key, the
// time of its newest packet and its state; ok is false when the slot holds
// no flow (it is on the free list, after its idle flow was reclaimed).
//
// A held flow never moves to another slot, so a listing can visit the
// slots from a cursor in several steps, with calls to Get in between (the
// packets of a live table), and see every flow held all along exactly once.
// A flow created meanwhile may or may not be seen; one evicted and created
// again may be seen twice, in two slots, starting afresh in the second.
// Idle flows not yet reclaimed are included, as in Range. The pointers are
// valid until the next call to Get. It does not allocate.
func (t *Table[V]) At(i int) (k *Key, last int64, v *V, ok bool) {
	e := t.ent(int32(i))
	if e.freq == freed {
		return nil, 0, nil, false
	}
	return &e.key, e.last, &e.val, true
}

// Range calls fn for each flow held, until fn returns false, in the order
// in which they would come up for eviction within each queue: the small
// queue from its oldest flow to its newest, then the main queue from its
// tail (the next under the clock hand) to its head. Idle flows not yet
// reclaimed are included; last tells them apart. fn must not call Get.
func (t *Table[V]) Range(fn func(k Key, last int64, v *V) bool) {
	for _, q := range [2]*fifo{&t.small, &t.main} {
		for i := q.tail; i != none; i = t.ent(i).next {
			e := t.ent(i)
			if !fn(e.key, e.last, &e.val) {
				return
			}
		}
	}
}
