package replay

import (
	"time"
)

// Kind is one of the counts a Timeline keeps per bucket and row.
type Kind int

const (
	// Offered: every packet (accepted or dropped).
	Offered Kind = iota
	// Dropped: packets given the DROP verdict.
	Dropped
	// ShadowDropped: packets a shadow rule accepted that its limit would
	// have dropped.
	ShadowDropped
	// Marked: packets over a rule's limit accepted with a new mark.
	Marked
	numKinds
)

// Timeline defaults, used by a Replayer with Options.Timeline.
const (
	// TimelineMinWidth is the narrowest bucket: 100 ms, coarse enough
	// that a flow of a few packets per second still reads as a rate.
	TimelineMinWidth = 100 * time.Millisecond
	// TimelineMaxBuckets is the most buckets a Timeline keeps; a longer
	// capture gets wider buckets.
	TimelineMaxBuckets = 600
	// TimelineMaxCells bounds a Timeline's counters (8 bytes each): a
	// policy with very many rules gets fewer, wider buckets (at least
	// timelineMinBuckets).
	TimelineMaxCells   = 2 << 20
	timelineMinBuckets = 60
)

// bucketWidths are the widths a Timeline can have, narrowest first; each
// is a whole multiple of the one before, so that widening merges whole
// buckets. After the last, widths double.
var bucketWidths = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond,
	time.Second, 2 * time.Second, 10 * time.Second, 20 * time.Second,
	time.Minute, 2 * time.Minute, 10 * time.Minute, 20 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// Timeline counts packets per row (a policy's rules, then unmatched,
// malformed and non-IP packets) and Kind over capture time, in buckets of
// one width that start at multiples of the width since the Unix epoch.
// The width starts at the narrowest allowed and widens (whole buckets
// merge) whenever the capture spans more buckets than the maximum, so a
// capture of any length takes at most that many buckets: memory is
// buckets × rows × 4 counters, allocated once by NewTimeline, and counting
// a packet never allocates. Capture timestamps may go backwards: earlier
// buckets are added in front.
//
// Not safe for concurrent use.
type Timeline struct {
	rows, stride int   // stride: counters per bucket, rows × numKinds
	ladder       int   // index in bucketWidths, or past it: doublings of the last
	width        int64 // ns
	origin       int64 // bucket 0 is [origin×width, (origin+1)×width)
	n            int   // buckets in use
	max          int
	cells        []uint64 // n × stride in use, cap max × stride
	// The bucket of the last packet: [lo, hi) ns, its first counter.
	lo, hi int64
	cur    int
}

// NewTimeline returns an empty Timeline of rows rows whose buckets are at
// least minWidth wide (rounded up to the next of 1, 2, 10, 20, 100, 200 ms,
// 1, 2, 10, 20 s, 1, 2, 10, 20 min, 1, 2, 6, 12, 24 h, then doublings) and
// at most maxBuckets (at least 1; fewer when rows × 4 × maxBuckets would
// exceed TimelineMaxCells).
func NewTimeline(rows int, minWidth time.Duration, maxBuckets int) *Timeline {
	rows = max(rows, 1)
	t := &Timeline{rows: rows, stride: rows * int(numKinds)}
	t.width = int64(bucketWidths[0])
	for t.width < int64(minWidth) {
		t.widen()
	}
	t.max = max(maxBuckets, 1)
	if t.max*t.stride > TimelineMaxCells {
		t.max = max(TimelineMaxCells/t.stride, min(t.max, timelineMinBuckets))
	}
	t.cells = make([]uint64, 0, t.max*t.stride)
	return t
}

// widen steps the width up the ladder and returns the factor.
func (t *Timeline) widen() int64 {
	t.ladder++
	next := 2 * t.width
	if t.ladder < len(bucketWidths) {
		next = int64(bucketWidths[t.ladder])
	}
	k := next / t.width
	t.width = next
	return k
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// add counts one packet at time now (ns) in row: dropped (the verdict was
// DROP), else exceeded (over the limit: a shadow drop, or marked when
// marked). It does not allocate.
func (t *Timeline) add(now int64, row int, dropped, exceeded, marked bool) {
	if now < t.lo || now >= t.hi {
		t.locate(now)
	}
	c := t.cells[t.cur+row*int(numKinds) : t.cur+row*int(numKinds)+int(numKinds)]
	c[Offered]++
	switch {
	case dropped:
		c[Dropped]++
	case exceeded && marked:
		c[Marked]++
	case exceeded:
		c[ShadowDropped]++
	}
}

// locate makes the bucket of time now the current one, adding buckets
// and widening them as needed.
func (t *Timeline) locate(now int64) {
	a := floorDiv(now, t.width)
	if t.n == 0 {
		t.origin = a
	}
	for {
		lo, hi := min(t.origin, a), max(t.origin+int64(t.n)-1, a)
		if hi-lo < int64(t.max) { // hi-lo+1 buckets fit
			break
		}
		t.merge(t.widen())
		a = floorDiv(now, t.width)
	}
	if a < t.origin { // earlier than every bucket: shift them up
		shift := int(t.origin - a)
		used := t.n * t.stride
		t.cells = t.cells[:used+shift*t.stride]
		copy(t.cells[shift*t.stride:], t.cells[:used])
		clear(t.cells[:shift*t.stride])
		t.n += shift
		t.origin = a
	}
	i := int(a - t.origin)
	if i >= t.n {
		t.cells = t.cells[:(i+1)*t.stride]
		clear(t.cells[t.n*t.stride:])
		t.n = i + 1
	}
	t.lo = a * t.width
	t.hi = t.lo + t.width
	t.cur = i * t.stride
}

// merge folds the buckets into buckets k times as wide (t.width is already
// the new width), in place: bucket j moves to a bucket ≤ j.
func (t *Timeline) merge(k int64) {
	if t.n == 0 {
		return
	}
	o := floorDiv(t.origin, k)
	last := 0
	for j := 0; j < t.n; j++ {
		nj := int(floorDiv(t.origin+int64(j), k) - o)
		last = nj
		if nj == j {
			continue
		}
		src := t.cells[j*t.stride : (j+1)*t.stride]
		dst := t.cells[nj*t.stride : (nj+1)*t.stride]
		for x, v := range src {
			dst[x] += v
		}
		clear(src)
	}
	t.origin = o
	t.n = last + 1
	t.cells = t.cells[:t.n*t.stride]
	t.lo, t.hi = 0, 0 // no current bucket
}

// Width is the buckets' width.
func (t *Timeline) Width() time.Duration { return time.Duration(t.width) }

// Len is the number of buckets, from the earliest packet's to the latest's.
func (t *Timeline) Len() int { return t.n }

// Rows is the number of rows.
func (t *Timeline) Rows() int { return t.rows }

// Start is the start of bucket 0, in nanoseconds since the Unix epoch (a
// multiple of Width; 0 when no packet was counted).
func (t *Timeline) Start() int64 { return t.origin * t.width }

// Count returns bucket b's count of kind k in row.
func (t *Timeline) Count(b, row int, k Kind) uint64 {
	return t.cells[b*t.stride+row*int(numKinds)+int(k)]
}

// Total returns row's count of kind k over all buckets.
func (t *Timeline) Total(row int, k Kind) uint64 {
	var s uint64
	for b := range t.n {
		s += t.Count(b, row, k)
	}
	return s
}
