package flows

import (
	"encoding/binary"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"unsafe"
)

func k(i int) Key {
	return Key{Family: 4, Proto: ProtoUDP, Src: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}, SrcPort: 1, DstPort: 2}
}

func TestTableCapAndLRU(t *testing.T) {
	const sec = int64(1e9) // the LRU order is exact to a second
	tb := NewTable[int](3, 0)
	for i := range 3 {
		v, fresh := tb.Get(kp(i), int64(i)*sec)
		if !fresh {
			t.Fatalf("Get(k%d) not fresh", i)
		}
		*v = i + 100
	}
	// Within a second of its last move, a packet does not reorder.
	tb.Get(kp(0), 10*sec-1)
	tb.Get(kp(1), 1*sec+5)
	// Touch k0: k1 is now least recently used.
	if v, fresh := tb.Get(kp(0), 10*sec); fresh || *v != 100 {
		t.Fatalf("Get(k0) = %d, %v; want 100, false", *v, fresh)
	}
	v, fresh := tb.Get(kp(3), 11*sec)
	if !fresh {
		t.Fatal("Get(k3) not fresh")
	}
	if *v != 101 {
		t.Errorf("new flow reused slot holding %d, want k1's 101 (the LRU)", *v)
	}
	*v = 103
	if tb.Len() != 3 || tb.Evictions() != 1 {
		t.Errorf("Len %d Evictions %d, want 3, 1", tb.Len(), tb.Evictions())
	}
	if _, fresh := tb.Get(kp(1), 12*sec); !fresh {
		t.Error("evicted k1 came back with its state")
	}
	// Order now (most recent first): k1, k3, k0; k2 was evicted by k1.
	var order []int
	tb.Range(func(key Key, _ int64, v *int) bool { order = append(order, int(key.Src[3])); return true })
	if want := []int{1, 3, 0}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("Range order %v, want %v", order, want)
	}
}

func TestTableExpiry(t *testing.T) {
	const sec = int64(1e9)
	tb := NewTable[int](2, 10*sec)
	a, _ := tb.Get(kp(1), 0)
	*a = 1
	b, _ := tb.Get(kp(2), 5*sec)
	*b = 2
	// k1 idle 10 s exactly: not yet expired.
	if _, fresh := tb.Get(kp(1), 10*sec); fresh {
		t.Error("flow expired after exactly the timeout")
	}
	// k2 idle 11 s: expired, and counted.
	if _, fresh := tb.Get(kp(2), 16*sec); !fresh || tb.Expired() != 1 {
		t.Errorf("idle flow not expired (Expired=%d)", tb.Expired())
	}
	// A new flow when full takes the idle flow's slot before any live one.
	tb.Get(kp(2), 20*sec) // k2 live at 20 s, k1 idle since 10 s
	if _, fresh := tb.Get(kp(3), 21*sec); !fresh {
		t.Fatal("k3 not fresh")
	}
	if tb.Evictions() != 0 || tb.Expired() != 2 {
		t.Errorf("Evictions %d Expired %d, want 0 and 2 (idle k1 reclaimed, nothing live evicted)", tb.Evictions(), tb.Expired())
	}
	if _, fresh := tb.Get(kp(2), 21*sec); fresh {
		t.Error("live k2 was evicted in favour of k3")
	}
}

func TestTableTimeBackwards(t *testing.T) {
	const sec = int64(1e9)
	tb := NewTable[int](2, 10*sec)
	tb.Get(kp(1), 100*sec)
	tb.Get(kp(1), 50*sec) // a packet from the past: last-seen stays 100 s
	if _, fresh := tb.Get(kp(1), 105*sec); fresh {
		t.Error("time going backwards made the flow look idle")
	}
	var last int64
	tb.Range(func(_ Key, l int64, _ *int) bool { last = l; return false })
	if last != 105*sec {
		t.Errorf("last seen %d, want %d", last, 105*sec)
	}
}

func TestTableBounded(t *testing.T) {
	tb := NewTable[[4]int64](1000, 0)
	for i := range 100000 {
		tb.Get(kp(i), int64(i))
	}
	if tb.Len() != 1000 || tb.Evictions() != 99000 || tb.n != 1000 || len(tb.chunks) != 1 || len(tb.chunks[0]) != 1000 {
		t.Errorf("Len %d Evictions %d slots %d in %d chunks, want 1000, 99000, 1000 in 1", tb.Len(), tb.Evictions(), tb.n, len(tb.chunks))
	}
}

// TestTableMemoryPerFlow measures what one flow costs, as the README
// states, with shaper's per-flow state.
func TestTableMemoryPerFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := NewTable[flowState](n, 0)
	for i := range n {
		key := spoof(i)
		tb.Get(&key, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes per flow at %d flows (entry %d bytes, 16 bytes of index)", per, n, unsafe.Sizeof(entry[flowState]{}))
	if per > 190 {
		t.Errorf("%.1f bytes per flow, want at most 190", per)
	}
	runtime.KeepAlive(tb)
}

// TestTableHeapPeak: while a table grows to 2^20 flows the heap never holds
// much more than the table will (no entries copied on growth, the index's
// old arrays at most its final size), so that bytes per flow times flows is
// what the process needs.
func TestTableHeapPeak(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 1 << 20
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := heap()
	peak := base
	tb := NewTable[flowState](n, 60e9)
	for i := range n + 1 {
		key := spoof(i)
		tb.Get(&key, 1)
		if i%1024 == 0 {
			peak = max(peak, heap())
		}
	}
	peak = max(peak, heap())
	runtime.GC()
	live := heap() - base
	ratio := float64(peak-base) / float64(live)
	t.Logf("live %.1f MiB, peak %.1f MiB while growing: %.3f of live", float64(live)/(1<<20), float64(peak-base)/(1<<20), ratio)
	if ratio > 1.10 {
		t.Errorf("heap peaked at %.3f of the table's live bytes, want at most 1.10", ratio)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
				t.Log(strings.Join(strings.Fields(l), " "))
			}
		}
	}
	runtime.KeepAlive(tb)
}

func TestTableNoAllocs(t *testing.T) {
	tb := NewTable[int](1000, 1e9)
	for i := range 1000 {
		tb.Get(kp(i), 0)
	}
	i := 0
	if n := testing.AllocsPerRun(10000, func() {
		tb.Get(kp(i%1000), int64(i))
		i++
	}); n != 0 {
		t.Errorf("Get on a working set: %v allocs, want 0", n)
	}
	// Churn through a full table: eviction reuses slots.
	if n := testing.AllocsPerRun(10000, func() {
		tb.Get(kp(5000+i), int64(i))
		i++
	}); n != 0 {
		t.Errorf("Get evicting: %v allocs, want 0", n)
	}
}

func kp(i int) *Key { x := k(i); return &x }

// spoof is the i-th key of a random-source flood (distinct from k's).
func spoof(i int) Key {
	return Key{Family: 4, Proto: ProtoUDP, Src: [16]byte{172, byte(i >> 16), byte(i >> 8), byte(i)}, SrcPort: uint16(i>>24) + 1, DstPort: 53}
}

// TestHashNoChosenCollisions: keys whose second source word equals one of
// the hash's public constants must not collapse to one hash (a regression:
// a constant multiplicand once made every such key collide, whatever the
// seed), and neither may keys differing only in any single field.
func TestHashNoChosenCollisions(t *testing.T) {
	x := newIndex(8, 8)
	var m1b [8]byte
	binary.LittleEndian.PutUint64(m1b[:], m1)
	families := map[string]func(i int) Key{
		"src[8:16]=m1": func(i int) Key {
			k := Key{Family: 6, Proto: ProtoUDP}
			binary.LittleEndian.PutUint64(k.Src[0:], uint64(i))
			copy(k.Src[8:], m1b[:])
			return k
		},
		"dst[8:16]=m2": func(i int) Key {
			k := Key{Family: 6, Proto: ProtoUDP}
			binary.LittleEndian.PutUint64(k.Src[0:], uint64(i))
			binary.LittleEndian.PutUint64(k.Dst[8:], m2)
			return k
		},
		"src port": func(i int) Key { return Key{Family: 4, SrcPort: uint16(i)} },
		"dst low byte": func(i int) Key {
			k := Key{Family: 4}
			k.Dst[15], k.Dst[14] = byte(i), byte(i>>8)
			return k
		},
	}
	for name, mk := range families {
		seen := map[uint64]bool{}
		for i := range 4096 {
			k := mk(i)
			seen[tag(x.hash(&k))] = true
		}
		if len(seen) < 4000 {
			t.Errorf("%s: 4096 keys gave only %d distinct 32-bit hashes", name, len(seen))
		}
	}
}
