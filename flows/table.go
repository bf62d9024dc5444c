package flows

import "time"

// Table is a bounded map from Key to per-flow state V, with idle expiry and
// least-recently-used eviction. It is what keeps packetshaper's memory
// bounded whatever the traffic.
//
// Contract:
//   - At most Max flows are held. A packet of a new flow when the table is
//     full evicts the least recently used flow (counted in Evictions); it
//     never fails and never refuses the new flow. The evicted flow's state
//     is forgotten: if it comes back it starts afresh, as a new flow would.
//     (Kernel hashlimit instead fails to match when its table is full, and
//     nft meters stop adding; both silently stop limiting new flows. We
//     prefer limiting the newest flows correctly and forgetting the oldest.)
//   - "Least recently used" is exact to within Granularity: a flow moves to
//     the front of the LRU order on its first packet after Granularity has
//     passed since its last move, not on every packet, which saves the
//     per-packet list writes (two cache misses at a million flows).
//   - A flow not seen for more than Timeout nanoseconds is idle: it is
//     treated as new on its next packet (counted in Expired), and idle flows
//     at the LRU end are reclaimed before any live flow is evicted.
//   - Time is an argument: now is nanoseconds since the Unix epoch, as the
//     caller's clock or the capture says. A flow's last-seen time never moves
//     backwards.
//
// Memory: an entry per flow (the key, two times, list links and V),
// allocated in chunks of 4096 entries as the table grows and never moved or
// copied, and two 8-byte index slots per flow at the cap (the index doubles
// as it grows: what it leaves behind adds up to less than its final size).
// Entries are reused, so a table at its cap allocates nothing more. Not safe
// for concurrent use.
type Table[V any] struct {
	max     int
	timeout int64
	gran    int64

	idx    index
	chunks [][]entry[V] // entry i is chunks[i>>chunkBits][i&chunkMask]
	n      int32        // entries handed out from chunks
	// LRU list through ents: head is the most recently used.
	head, tail int32
	// free lists slots of expired flows, chained through next.
	free int32

	evictions, expired uint64
}

type entry[V any] struct {
	key        Key
	last       int64 // newest packet time
	moved      int64 // when it last moved to the LRU front
	prev, next int32
	val        V
}

const (
	none      = -1
	chunkBits = 12
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

// DefaultMaxFlows is what NewTable uses for max <= 0.
const DefaultMaxFlows = 65536

// MaxMaxFlows is the largest cap a table takes.
const MaxMaxFlows = 1 << 30

// Granularity is how stale the LRU order may be: Timeout/64, at most one
// second (one second when there is no timeout).
func granularity(timeout int64) int64 {
	g := int64(time.Second)
	if timeout > 0 {
		g = min(g, timeout/64)
	}
	return g
}

// NewTable returns a table of at most max flows (DefaultMaxFlows if max <=
// 0, at most MaxMaxFlows) that expires flows idle for more than timeout
// nanoseconds (never, if timeout <= 0).
func NewTable[V any](max int, timeout int64) *Table[V] {
	if max <= 0 {
		max = DefaultMaxFlows
	}
	max = min(max, MaxMaxFlows)
	hint := min(max, chunkLen)
	t := &Table[V]{
		max:     max,
		timeout: timeout,
		gran:    granularity(timeout),
		idx:     newIndex(hint, max),
		chunks:  make([][]entry[V], 1, (max+chunkLen-1)/chunkLen),
		head:    none,
		tail:    none,
		free:    none,
	}
	t.chunks[0] = make([]entry[V], hint)
	return t
}

// ent returns entry i.
func (t *Table[V]) ent(i int32) *entry[V] {
	return &t.chunks[uint32(i)>>chunkBits][uint32(i)&chunkMask]
}

// lookup returns k's index slot and whether k is there; if not, the slot is
// the empty one where it goes.
func (t *Table[V]) lookup(k *Key, h uint64) (slot uint64, ok bool) {
	x := &t.idx
	tg := tag(h)
	for i := tg & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return i, false
		}
		if s>>32 == tg && t.ent(int32(s&0xffffffff)-1).key == *k {
			return i, true
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
	h := t.idx.hash(k)
	slot, ok := t.lookup(k, h)
	if ok {
		i := int32(t.idx.slots[slot]&0xffffffff) - 1
		e := t.ent(i)
		if t.timeout > 0 && now-e.last > t.timeout {
			t.expired++
			fresh = true
		}
		if now > e.last {
			e.last = now
			if now-e.moved >= t.gran {
				e.moved = now
				t.touch(i)
			}
		}
		return &e.val, fresh
	}
	i := t.alloc(now)
	if t.idx.full() {
		t.idx.grow()
	}
	// alloc may have removed keys, and grow moved everything: look again.
	slot, _ = t.lookup(k, h)
	t.idx.put(slot, h, i)
	e := t.ent(i)
	e.key, e.last, e.moved = *k, now, now
	t.pushFront(i)
	return &e.val, true
}

// alloc returns a slot for a new flow: a free one, a new one while under
// the cap, else the least recently used flow's.
func (t *Table[V]) alloc(now int64) int32 {
	// Reclaim a couple of idle flows from the LRU end each time a flow is
	// created: bounded work per packet, and idle flows go before live ones.
	for n := 0; n < 2 && t.tail != none && t.timeout > 0 && now-t.ent(t.tail).last > t.timeout; n++ {
		i := t.tail
		t.remove(i)
		t.expired++
		t.ent(i).next = t.free
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
		}
		t.n++
		return i
	}
	i := t.tail
	t.remove(i)
	t.evictions++
	return i
}

// remove takes entry i out of the index and the LRU list.
func (t *Table[V]) remove(i int32) {
	e := t.ent(i)
	if slot, ok := t.lookup(&e.key, t.idx.hash(&e.key)); ok {
		t.idx.del(slot)
	}
	t.unlink(i)
}

func (t *Table[V]) unlink(i int32) {
	e := t.ent(i)
	if e.prev != none {
		t.ent(e.prev).next = e.next
	} else {
		t.head = e.next
	}
	if e.next != none {
		t.ent(e.next).prev = e.prev
	} else {
		t.tail = e.prev
	}
}

func (t *Table[V]) pushFront(i int32) {
	e := t.ent(i)
	e.prev, e.next = none, t.head
	if t.head != none {
		t.ent(t.head).prev = i
	}
	t.head = i
	if t.tail == none {
		t.tail = i
	}
}

func (t *Table[V]) touch(i int32) {
	if t.head == i {
		return
	}
	t.unlink(i)
	t.pushFront(i)
}

// Len is the number of flows held, idle ones not yet reclaimed included.
func (t *Table[V]) Len() int { return t.idx.n }

// Max is the table's cap.
func (t *Table[V]) Max() int { return t.max }

// Evictions counts live flows evicted because the table was full.
func (t *Table[V]) Evictions() uint64 { return t.evictions }

// Expired counts flows that were found idle for longer than the timeout.
func (t *Table[V]) Expired() uint64 { return t.expired }

// Range calls fn for each flow held, most recently used first (to within
// the granularity), until fn
// returns false. fn must not call Get.
func (t *Table[V]) Range(fn func(k Key, last int64, v *V) bool) {
	for i := t.head; i != none; i = t.ent(i).next {
		e := t.ent(i)
		if !fn(e.key, e.last, &e.val) {
			return
		}
	}
}
