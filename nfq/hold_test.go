package nfq

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// kernelQueue simulates the kernel's queue of packets waiting for a
// verdict, as nfnetlink_queue keeps it: a list in id order. A batch verdict
// takes every packet from the head up to its id (it stops at the first
// higher id); a verdict by id takes that packet only.
type kernelQueue struct {
	ids []uint32
	got map[uint32]Verdict
}

func (k *kernelQueue) apply(t *testing.T, out []byte) (msgs, batches int) {
	t.Helper()
	for len(out) > 0 {
		l := int(binary.LittleEndian.Uint32(out))
		if (l != verdictMsgLen && l != verdictMsgLen+markAttrLen) || l > len(out) {
			t.Fatalf("nlmsg_len %d", l)
		}
		m := out[:l]
		out = out[l:]
		msgs++
		var v Verdict
		if binary.BigEndian.Uint32(m[24:]) == nfDrop {
			v.Action = Drop
		}
		if l > verdictMsgLen {
			v.SetMark, v.Mark = true, binary.BigEndian.Uint32(m[36:])
		}
		id := binary.BigEndian.Uint32(m[28:])
		switch binary.LittleEndian.Uint16(m[4:]) {
		case nfqnlMsgVerdictBatch:
			batches++
			n := 0
			for n < len(k.ids) && !idBefore(id, k.ids[n]) {
				k.got[k.ids[n]] = v
				n++
			}
			k.ids = k.ids[n:]
		case nfqnlMsgVerdict:
			i := slices.Index(k.ids, id)
			if i < 0 {
				t.Fatalf("verdict for id %d, which is not queued", id)
			}
			k.got[id] = v
			k.ids = slices.Delete(k.ids, i, i+1)
		default:
			t.Fatalf("message type %#x", binary.LittleEndian.Uint16(m[4:]))
		}
	}
	return msgs, batches
}

func randVerdict(r *rand.Rand) Verdict {
	switch r.IntN(6) {
	case 0:
		return Verdict{Action: Drop}
	case 1:
		return Verdict{SetMark: true, Mark: 0x10}
	}
	return Verdict{}
}

// TestHeldVerdicts: batches answered while packets are held, and held
// packets released in any order, against the kernel's rules for batch and
// single verdicts: every answered packet gets exactly its verdict, no held
// packet is answered before its release, and batch verdicts are used where
// they are safe (no packet held, or a release of the lowest ids).
func TestHeldVerdicts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 300; iter++ {
		k := &kernelQueue{got: map[uint32]Verdict{}}
		hh := newHoldHeap(256)
		want := map[uint32]Verdict{}
		id := uint32(r.IntN(100)) - 50 // ids wrap around 0 in some runs
		now := int64(1000)
		out := make([]byte, 0, (64+256)*maxVerdictMsgLen)
		var rel []heldPkt
		for round := 0; round < 20; round++ {
			now += int64(r.IntN(50))
			// Release what is due, then answer a batch, in one write.
			out = out[:0]
			var msgs int
			var still bool
			var minHeld uint32
			rel, still, minHeld = hh.popDue(rel, now)
			out, msgs = appendReleases(out, 7, rel, still, minHeld, 1)
			for _, p := range rel {
				want[p.id] = p.verdict()
			}
			heldBefore := hh.len() > 0
			n := 1 + r.IntN(64)
			pkts := make([]Packet, n)
			vs := make([]Verdict, n)
			for i := range pkts {
				id += 1 + uint32(r.IntN(2))
				pkts[i].ID = id
				k.ids = append(k.ids, id)
				vs[i] = randVerdict(r)
				if r.IntN(3) == 0 && !hh.full() {
					vs[i].At = now + 1 + int64(r.IntN(200))
					hh.push(heldPkt{at: vs[i].At, id: id, mark: vs[i].Mark, action: vs[i].Action, setMark: vs[i].SetMark})
				} else {
					want[id] = vs[i]
				}
			}
			out, m := appendVerdicts(out, 7, pkts, vs, heldBefore, 1)
			if got, _ := k.apply(t, out); got != msgs+m {
				t.Fatalf("iter %d: %d messages, said %d", iter, got, msgs+m)
			}
			if !heldBefore && vs[0].At == 0 && n > 1 && m == n && vs[0] == vs[1] {
				t.Fatalf("iter %d: a run answered one by one with nothing held", iter)
			}
			// Exactly the released and immediate packets have verdicts,
			// and the right ones.
			for id, v := range k.got {
				if w, ok := want[id]; !ok || w != v {
					t.Fatalf("iter %d round %d: id %d got %+v, want %+v (answered: %v)", iter, round, id, v, w, ok)
				}
			}
			if len(k.got) != len(want) || len(k.ids) != hh.len() {
				t.Fatalf("iter %d round %d: %d answered (want %d), %d queued (want %d held)", iter, round, len(k.got), len(want), len(k.ids), hh.len())
			}
		}
		// A stop releases everything: one batch verdict per run of equal
		// verdicts (one if all held verdicts are equal).
		rel = hh.popAll(rel)
		for _, p := range rel {
			want[p.id] = p.verdict()
		}
		out, _ = appendReleases(out[:0], 7, rel, false, 0, 1)
		_, batches := k.apply(t, out)
		if len(k.ids) != 0 || len(k.got) != len(want) {
			t.Fatalf("iter %d: %d left queued after releasing all", iter, len(k.ids))
		}
		if len(rel) > 0 && batches == 0 {
			t.Fatalf("iter %d: releasing all used no batch verdict", iter)
		}
	}
}

// TestReleaseAllOneMessage: a stop with every held packet accepting is one
// batch verdict.
func TestReleaseAllOneMessage(t *testing.T) {
	hh := newHoldHeap(100)
	for i := 0; i < 100; i++ {
		hh.push(heldPkt{at: int64(1000 - i), id: uint32(10 + 2*i)})
	}
	rel := hh.popAll(nil)
	out, msgs := appendReleases(make([]byte, 0, len(rel)*maxVerdictMsgLen), 7, rel, false, 0, 1)
	k := &kernelQueue{got: map[uint32]Verdict{}}
	for _, p := range rel {
		k.ids = append(k.ids, p.id)
	}
	if m, b := k.apply(t, out); msgs != 1 || m != 1 || b != 1 || len(k.ids) != 0 {
		t.Errorf("releasing 100 accepting packets: %d messages (%d batch), %d left", m, b, len(k.ids))
	}
}

func TestHoldHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	hh := newHoldHeap(1000)
	var ats []int64
	for i := 0; i < 1000; i++ {
		at := int64(r.IntN(300))
		hh.push(heldPkt{at: at, id: uint32(i)})
		ats = append(ats, at)
	}
	if !hh.full() || hh.minID() != 0 {
		t.Fatalf("full %v, min id %d", hh.full(), hh.minID())
	}
	slices.Sort(ats)
	var last heldPkt
	for i := range ats {
		p := hh.pop()
		if p.at != ats[i] || (i > 0 && p.at == last.at && !idBefore(last.id, p.id)) {
			t.Fatalf("pop %d: at %d id %d after at %d id %d, want at %d", i, p.at, p.id, last.at, last.id, ats[i])
		}
		last = p
	}
	if a := testing.AllocsPerRun(100, func() {
		for i := 0; i < 100; i++ {
			hh.push(heldPkt{at: int64(r.IntN(50)), id: uint32(i)})
		}
		var rel [100]heldPkt
		out, _, _ := hh.popDue(rel[:0], 25)
		_ = hh.popAll(out)
	}); a != 0 {
		t.Errorf("heap: %v allocations", a)
	}
}

// listEntry stands for the kernel's struct nf_queue_entry (list head, skb,
// id, hook state, route keys: about 128 bytes, each its own allocation).
type listEntry struct {
	next *listEntry
	_    [7]uint64
	id   uint32
	_    [7]uint64
}

var walkSink *listEntry

// BenchmarkKernelListWalk emulates, in user space, the lookup a verdict by
// id costs on kernels without nfnetlink_queue's hash table of queued
// packets (find_dequeue_entry walks the queue from its head): with N
// packets held at the head, finding a newer packet walks past all N. The
// entries are allocated one by one with other allocations between them, as
// the kernel's are over time. ns/op is one such lookup.
func BenchmarkKernelListWalk(b *testing.B) {
	for _, n := range []int{1, 64, 256, 1024, 4096, 16384} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			var head, tail *listEntry
			var junk [][]byte
			for i := 0; i <= n; i++ {
				e := &listEntry{id: uint32(i)}
				junk = append(junk, make([]byte, 64+i%512))
				if head == nil {
					head = e
				} else {
					tail.next = e
				}
				tail = e
			}
			want := uint32(n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := head
				for e != nil && e.id != want {
					e = e.next
				}
				walkSink = e
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/held")
			_ = junk
		})
	}
}
