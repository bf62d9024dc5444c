package replay

import (
	"math"
	"math/bits"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// holdRoom is how many more packets shaping rules may delay now, for a
// packet of n captured bytes: Options.MaxHeld less those held, none if
// holding it would take the held packets past MaxHeldBytes.
func (r *Replayer) holdRoom(n int) int {
	if r.heldBytes+n+heldOverhead > MaxHeldBytes {
		return 0
	}
	switch m := r.opts.MaxHeld; {
	case m == 0:
		return math.MaxInt
	case m < 0:
		return 0
	default:
		return max(m-r.held.Len(), 0)
	}
}

// heldRec is a delayed packet waiting to be written to Accepted.
type heldRec struct {
	depart int64
	seq    uint64 // arrival order, for equal departures
	ci     gopacket.CaptureInfo
	lt     layers.LinkType
	size   int    // captured bytes
	data   []byte // a copy of them, when Accepted is written
	shift  int64  // its file's clock shift: depart-shift is in its own timestamps
}

// buffer returns an empty buffer of capacity at least n, at most 2n (or
// 64), from the free ones of its size class if there is one.
func (r *Replayer) buffer(n int) []byte {
	k := 6
	if n > 64 {
		k = bits.Len(uint(n - 1))
	}
	if f := r.free[k]; len(f) > 0 {
		b := f[len(f)-1]
		r.free[k] = f[:len(f)-1]
		r.freeBytes -= cap(b)
		return b[:0]
	}
	return make([]byte, 0, 1<<k)
}

// recycle keeps b, a buffer from buffer, for reuse, unless the free
// buffers would then take more than MaxHeldBytes.
func (r *Replayer) recycle(b []byte) {
	if b == nil || r.freeBytes+cap(b) > MaxHeldBytes {
		return
	}
	k := bits.Len(uint(cap(b) - 1))
	r.free[k] = append(r.free[k], b)
	r.freeBytes += cap(b)
}

func (a *heldRec) before(b *heldRec) bool {
	return a.depart < b.depart || a.depart == b.depart && a.seq < b.seq
}

// hold puts a delayed packet into the heap of held packets, with a copy
// of its bytes when Accepted is written. Buffers are reused: once the heap
// has grown to the shaping queues' size, holding allocates nothing.
func (r *Replayer) hold(data []byte, ci *gopacket.CaptureInfo, lt layers.LinkType, depart int64) {
	c := *ci
	c.AncillaryData = nil
	r.heldSeq++
	rec := heldRec{depart: depart, seq: r.heldSeq, ci: c, lt: lt, size: len(data), shift: r.clk.shift}
	if r.acc.buf != nil {
		rec.data = append(r.buffer(len(data)), data...)
	}
	r.heldBytes += len(data) + heldOverhead
	r.held.Push(rec)
}

// release lets the held packets that depart at or before until (all of
// them for math.MaxInt64) go: when Accepted is written, it writes them to
// it in departure order, each with its departure time as its timestamp.
func (r *Replayer) release(until int64) error {
	for r.held.Len() > 0 && r.held.Top().depart <= until {
		top := r.held.Pop()
		r.heldBytes -= top.size + heldOverhead
		if r.acc.buf == nil {
			continue
		}
		top.ci.Timestamp = time.Unix(0, top.depart-top.shift).UTC()
		err := r.acc.write(top.data, &top.ci, top.lt)
		r.recycle(top.data)
		if err != nil {
			return err
		}
	}
	return nil
}
