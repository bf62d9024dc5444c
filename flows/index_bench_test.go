package flows

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// mapTable is Table with a Go map[Key]int32 in place of its index, for
// BenchmarkTableIndex only. It embeds a Table for the entries, queues and
// ghost and mirrors, line for line, the methods of table.go that touch the
// index (Get, insert, alloc, evict, drop); everything else is Table's own
// code. The ghost still needs a seeded 64-bit hash of the key, so a new
// flow and an eviction compute the index's hash as Table does; a hit does
// not (the map hashes the key itself). TestMapTableMirrors checks that it
// makes the same decisions as Table, packet for packet.
//
// It is a copy rather than a Table with a pluggable index so that the
// production path keeps its direct calls: keep it in step with table.go.
type mapTable[V any] struct {
	Table[V]
	m map[Key]int32
}

func newMapTable[V any](maxFlows int, timeout int64) *mapTable[V] {
	// No size hint: NewTable does not size its index for the cap either
	// (many rules each have a table, mostly small ones).
	return &mapTable[V]{Table: *NewTable[V](maxFlows, timeout), m: make(map[Key]int32)}
}

// Get is Table.Get with a map lookup.
func (t *mapTable[V]) Get(k *Key, now int64) (v *V, fresh bool) {
	i, ok := t.m[*k]
	if !ok {
		return t.insert(k, now), true
	}
	e := t.ent(i)
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
	return &e.val, fresh
}

func (t *mapTable[V]) insert(k *Key, now int64) *V {
	h := t.idx.hash(k) // for the ghost only
	q := &t.small
	if t.ghostTake(h) {
		q = &t.main
	}
	i := t.alloc(now)
	if q == &t.small && t.small.n >= t.sTarget {
		j, e := t.pop(&t.small)
		e.freq = 0
		t.push(&t.main, j, e)
	}
	t.m[*k] = i
	e := t.ent(i)
	e.key, e.last, e.freq = *k, now, 0
	t.push(q, i, e)
	return &e.val
}

func (t *mapTable[V]) alloc(now int64) int32 {
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
			grown := make([]entry[V], min(max(2*len(t.chunks[0]), firstChunk), chunkLen, t.max))
			copy(grown, t.chunks[0])
			t.chunks[0] = grown
		}
		t.n++
		return i
	}
	return t.evict(now)
}

func (t *mapTable[V]) evict(now int64) int32 {
	if t.ghost == nil {
		g := 1
		for g < t.max {
			g <<= 1
		}
		t.ghost = make([]uint32, g)
		t.gmask = uint64(g - 1)
	}
	for {
		if t.small.n >= t.sTarget {
			i, e := t.pop(&t.small)
			switch {
			case t.idle(e, now):
				t.drop(i, e)
				t.expired++
				return i
			case e.freq > 0:
				e.freq = 0
				t.push(&t.main, i, e)
				continue
			}
			t.ghostPut(t.drop(i, e))
			t.evictions++
			return i
		}
		i, e := t.pop(&t.main)
		switch {
		case t.idle(e, now):
			t.drop(i, e)
			t.expired++
			return i
		case e.freq > 0:
			e.freq--
			t.push(&t.main, i, e)
			continue
		}
		t.drop(i, e)
		t.evictions++
		return i
	}
}

func (t *mapTable[V]) drop(i int32, e *entry[V]) uint64 {
	delete(t.m, e.key)
	return t.idx.hash(&e.key)
}

// TestMapTableMirrors: mapTable, with the same hash seed, gives the same
// answers and keeps the same queues as Table over random traffic with
// creation, eviction, the ghost and idle reclaims, so that
// BenchmarkTableIndex compares the indexes alone.
func TestMapTableMirrors(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, max := range []int{1, 3, 10, 100, chunkLen + 10} {
		timeout := int64(2*max + 10)
		a := seeded[int](max, timeout)
		b := newMapTable[int](max, timeout)
		b.idx.seed = a.idx.seed
		now := int64(0)
		for n := range 30 * max {
			now += int64(r.IntN(4))
			key := k(r.IntN(3 * max))
			va, fa := a.Get(&key, now)
			vb, fb := b.Get(&key, now)
			if fa != fb {
				t.Fatalf("max %d step %d: Get(%v) fresh %v, map-indexed %v", max, n, key, fa, fb)
			}
			if fa {
				*va, *vb = 0, 0
			}
			*va++
			*vb++
			if *va != *vb {
				t.Fatalf("max %d step %d: state %d, map-indexed %d", max, n, *va, *vb)
			}
		}
		if qa, qb := queues(a), queues(&b.Table); qa != qb {
			t.Fatalf("max %d: queues %q, map-indexed %q", max, qa, qb)
		}
		if a.Len() != len(b.m) || a.Evictions() != b.Evictions() || a.Expired() != b.Expired() {
			t.Fatalf("max %d: Len %d/%d, Evictions %d/%d, Expired %d/%d", max,
				a.Len(), len(b.m), a.Evictions(), b.Evictions(), a.Expired(), b.Expired())
		}
		if max >= 10 && (a.Evictions() == 0 || a.Expired() == 0) {
			t.Fatalf("max %d: %d evictions, %d expired: the test misses a path", max, a.Evictions(), a.Expired())
		}
		checkTable(t, a)
	}
}

// BenchmarkTableIndex measures Table.Get with its open-addressing index
// (index=custom) against the same table with a Go map[Key]int32 as its
// index (index=map, mapTable above), at 10 000, 100 000 and 1 000 000
// flows, with shaper's per-flow state:
//
//   - hit: packets cycle through every held flow in order (at a million,
//     the cache-unfriendly case: each packet misses the CPU caches);
//   - churn: every packet is a new flow at a full table, so each Get
//     misses, evicts a flow (index delete) and inserts (index insert).
//
// Each reports B/flow, the heap the whole table takes per flow once full
// (hit) or after 2×flows more evictions and the timed ones (churn), and
// peakB/flow, the heap at its highest while the table grew, per flow (hit
// only). Compare the two indexes within one run:
//
//	go test -run '^$' -bench TableIndex -benchmem -count 3 ./flows
func BenchmarkTableIndex(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, op := range []string{"hit", "churn"} {
			for _, index := range []string{"custom", "map"} {
				b.Run(fmt.Sprintf("%s/flows=%d/index=%s", op, n, index), func(b *testing.B) {
					benchIndex(b, op, n, index == "custom")
				})
			}
		}
	}
}

func benchIndex(b *testing.B, op string, n int, custom bool) {
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = k(i)
	}
	// The churn keys: distinct from the held ones and from each other
	// for 2^32 packets.
	c := 0
	churn := func() *Key {
		key := &keys[c%n]
		key.Src[0], key.Src[1], key.Src[2], key.Src[3] = 11, byte(c>>16), byte(c>>8), byte(c)
		key.SrcPort = uint16(c >> 24)
		c++
		return key
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	var (
		ct  *Table[flowState]
		mt  *mapTable[flowState]
		get func(k *Key, now int64) (*flowState, bool) // setup only
	)
	if custom {
		ct = NewTable[flowState](n, 60e9)
		get = ct.Get
	} else {
		mt = newMapTable[flowState](n, 60e9)
		get = mt.Get
	}
	now := int64(1)
	for i := range keys {
		get(&keys[i], now)
		if i&1023 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	if op == "churn" {
		for range 2 * n {
			now += 100
			get(churn(), now)
		}
	}
	// The timed loops call Get directly, written out once per table.
	b.ReportAllocs()
	i := 0
	switch {
	case op == "hit" && custom:
		for b.Loop() {
			now += 100
			v, _ := ct.Get(&keys[i], now)
			v.a[0]++
			if i++; i == n {
				i = 0
			}
		}
	case op == "hit":
		for b.Loop() {
			now += 100
			v, _ := mt.Get(&keys[i], now)
			v.a[0]++
			if i++; i == n {
				i = 0
			}
		}
	case custom:
		for b.Loop() {
			now += 100
			v, _ := ct.Get(churn(), now)
			v.a[0]++
		}
	default:
		for b.Loop() {
			now += 100
			v, _ := mt.Get(churn(), now)
			v.a[0]++
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc-base)/float64(n), "B/flow")
	if op == "hit" {
		b.ReportMetric(float64(peak-base)/float64(n), "peakB/flow")
	}
	runtime.KeepAlive(keys)
	runtime.KeepAlive(ct)
	runtime.KeepAlive(mt)
}
