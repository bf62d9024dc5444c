package flows

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// mapIndex is a Go map[Key]int32 as a Table's index (altIndex), for
// BenchmarkTableIndex: the table, its queues, eviction and ghost are the
// production code, only the index differs.
type mapIndex map[Key]int32

func (m mapIndex) get(k Key) (int32, bool) { i, ok := m[k]; return i, ok }
func (m mapIndex) put(k Key, pos int32)    { m[k] = pos }
func (m mapIndex) remove(k Key)            { delete(m, k) }
func (m mapIndex) len() int                { return len(m) }

// newMapTable returns NewTable's table with a Go map as its index.
func newMapTable[V any](maxFlows int, timeout int64) *Table[V] {
	t := NewTable[V](maxFlows, timeout)
	// No size hint: NewTable does not size its index for the cap either
	// (many rules each have a table, mostly small ones).
	t.alt = mapIndex(make(map[Key]int32))
	return t
}

// TestMapIndexSame: the table with a Go map as its index, with the same
// hash seed (for the ghost), gives the same answers and keeps the same
// queues as with its own index over random traffic with creation,
// eviction, the ghost and idle reclaims, so that BenchmarkTableIndex
// compares the indexes alone.
func TestMapIndexSame(t *testing.T) {
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
		if qa, qb := queues(a), queues(b); qa != qb {
			t.Fatalf("max %d: queues %q, map-indexed %q", max, qa, qb)
		}
		if a.Len() != b.Len() || a.Evictions() != b.Evictions() || a.Expired() != b.Expired() {
			t.Fatalf("max %d: Len %d/%d, Evictions %d/%d, Expired %d/%d", max,
				a.Len(), b.Len(), a.Evictions(), b.Evictions(), a.Expired(), b.Expired())
		}
		if max >= 10 && (a.Evictions() == 0 || a.Expired() == 0) {
			t.Fatalf("max %d: %d evictions, %d expired: the test misses a path", max, a.Evictions(), a.Expired())
		}
		checkTable(t, a)
	}
}

// BenchmarkTableIndex measures Table.Get with its open-addressing index
// (index=custom) against the same table with a Go map[Key]int32 as its
// index (index=map, mapIndex above), at 10 000, 100 000 and 1 000 000
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
		mt  *Table[flowState]
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
