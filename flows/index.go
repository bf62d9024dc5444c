package flows

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
)

// index maps a Key to its entry's position in a Table. It is an
// open-addressing hash table with linear probing and backward-shift
// deletion, sized to a power of two at most half full.
//
// Why not a Go map: a slot here is 8 bytes holding 32 bits of the hash
// beside the entry's position, so a lookup touches one slot and the entry it
// names, and compares the 40-byte key only when the 32 hash bits already
// match; a Go map's lookup hashes the 40 bytes, reads its directory, its
// table, a control word and a 44-byte slot, then the entry. And the table's
// memory cap (MaxBytes) counts this index exactly, 8 bytes × at most twice
// Max slots; a map's size is up to the runtime's implementation.
// BenchmarkTableIndex runs Table.Get over this index and over a Go
// map[Key]int32 (plugged in as the table's altIndex: the same table, queues
// and eviction otherwise) in one process:
//
//	go test -run '^$' -bench TableIndex -benchmem -count 3 ./flows
//
// Measured here (Go 1.26, 2 shared vCPUs, two runs of -count 3, ratios of
// each pair run side by side), this index's Get costs, against the map's:
//
//	                 hit          new flow evicting one
//	10 000 flows     0.57–0.83×   0.44–0.68×
//	100 000 flows    0.40–0.57×   0.27–0.69×
//	1 000 000 flows  0.33–0.54×   0.43–0.77×
//
// and the whole table takes 187/181/177 bytes per flow at 10 000/100 000/
// 1 000 000 flows against the map's 239/223/260, 193/186/181 after churn
// against 325/291/265 (the map grew while its count stayed at the cap). So the index stays: it is faster at every size and bounded.
// Go 1.26's maps are seeded per map and would resist chosen collisions as
// well; that is not the reason (the ghost needs a seeded hash anyway).
//
// The hash is keyed with a random seed per table so that senders cannot
// choose 5-tuples that collide.
type index struct {
	slots []uint64 // 0 = empty; else hash32<<32 | position+1
	mask  uint64
	seed  [3]uint64
	limit int // slot count will not grow past this
	n     int
}

func newIndex(hint, maxEntries int) index {
	limit := 1 << bits.Len(uint(2*maxEntries-1))
	size := min(1<<bits.Len(uint(2*max(hint, 8)-1)), limit)
	return index{slots: make([]uint64, size), mask: uint64(size - 1), limit: limit,
		seed: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64()}}
}

const (
	m1 = 0xa0761d6478bd642f
	m2 = 0xe7037ed1a0b428db
	m3 = 0x8ebc6af09c88c6e3
)

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hash is a seeded wyhash-style mix of the key's 40 bytes.
// Both operands of every multiplication carry a secret: with a constant
// operand, a key word equal to that constant would zero the product
// whatever the seed, and senders could make every key collide.
func (x *index) hash(k *Key) uint64 {
	le := binary.LittleEndian
	s := &x.seed
	b := k.bytes()
	h := mix(le.Uint64(b[0:])^s[0]^m1, le.Uint64(b[8:])^s[1])
	h = mix(h^le.Uint64(b[16:])^s[2], le.Uint64(b[24:])^s[0]^m2)
	return mix(h^le.Uint64(b[32:])^s[1]^m3, s[2]^m1)
}

// tag is the part of a hash stored in a slot; its low bits pick the home
// slot.
func tag(h uint64) uint64 { return h & 0xffffffff }

// put stores position pos for a key of hash h in an empty slot found by
// Table.lookup.
func (x *index) put(slot, h uint64, pos int32) {
	x.slots[slot] = tag(h)<<32 | uint64(pos+1)
	x.n++
}

// remove deletes the slot holding position pos for a key of hash h, if
// any: it compares positions, not keys.
func (x *index) remove(h uint64, pos int32) {
	want := tag(h)<<32 | uint64(pos+1)
	for i := tag(h) & x.mask; ; i = (i + 1) & x.mask {
		switch x.slots[i] {
		case want:
			x.del(i)
			return
		case 0:
			return
		}
	}
}

// del empties slot i and shifts later entries of its probe run back, so
// that no tombstones slow lookups down.
func (x *index) del(i uint64) {
	x.n--
	for j := (i + 1) & x.mask; ; j = (j + 1) & x.mask {
		s := x.slots[j]
		if s == 0 {
			break
		}
		home := (s >> 32) & x.mask
		// Move s into the hole at i if its home is not in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = 0
}

// full reports whether one more entry would make the index more than half
// full while it may still grow.
func (x *index) full() bool { return 2*(x.n+1) > len(x.slots) && len(x.slots) < x.limit }

// grow doubles the slot count and reinserts every slot.
func (x *index) grow() {
	old := x.slots
	x.slots = make([]uint64, 2*len(old))
	x.mask = uint64(len(x.slots) - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := (s >> 32) & x.mask
		for x.slots[i] != 0 {
			i = (i + 1) & x.mask
		}
		x.slots[i] = s
	}
}

// altIndex is an index a Table can use in idx's place, for tests only
// (BenchmarkTableIndex's Go map): the table's own index stays a concrete
// type, so that the hot path makes direct calls and inlines them; the
// table pays one nil check per Get for the plug. Keys go by value: a
// pointer passed to an interface's method escapes, and the caller's key
// would then be allocated on the heap at every Get.
type altIndex interface {
	// get returns k's position.
	get(k Key) (pos int32, ok bool)
	// put adds k at position pos; k is absent.
	put(k Key, pos int32)
	// remove deletes k.
	remove(k Key)
	len() int
}
