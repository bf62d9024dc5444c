package nfq

import "slices"

// Holding packets (Verdict.At).
//
// A held packet stays in the kernel's queue until Run gives it its
// verdict. Run keeps what it needs for that (id, verdict, time) in a
// binary min-heap by time, of fixed capacity (Config.MaxHeld), on its own
// goroutine: no goroutine, timer or allocation per packet. One kernel
// timer (a timerfd, in the same wait as the socket) is set to the earliest
// time, so Run wakes for it with or without traffic (hold_linux.go).
//
// Verdicts must not release a held packet early: see appendVerdicts and
// appendReleases for how batch verdicts are kept to runs that cover no held
// packet.

// heldPkt is a packet held in the kernel's queue until at.
type heldPkt struct {
	at      int64
	id      uint32
	mark    uint32
	action  Action
	setMark bool
}

func (p *heldPkt) verdict() Verdict {
	return Verdict{Action: p.action, SetMark: p.setMark, Mark: p.mark}
}

// before orders the heap: by time, then by id (queue order).
func (p *heldPkt) before(q *heldPkt) bool {
	return p.at < q.at || p.at == q.at && idBefore(p.id, q.id)
}

// holdHeap is a min-heap of held packets by time. Its backing array is
// allocated once (Config.MaxHeld); push must not be called when full.
type holdHeap struct{ h []heldPkt }

func newHoldHeap(n int) holdHeap { return holdHeap{h: make([]heldPkt, 0, n)} }

func (hh *holdHeap) len() int   { return len(hh.h) }
func (hh *holdHeap) full() bool { return len(hh.h) == cap(hh.h) }

// top is the packet due first; the heap must not be empty.
func (hh *holdHeap) top() *heldPkt { return &hh.h[0] }

func (hh *holdHeap) push(p heldPkt) {
	h := append(hh.h, p)
	for i := len(h) - 1; i > 0; {
		up := (i - 1) / 2
		if !h[i].before(&h[up]) {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
	hh.h = h
}

func (hh *holdHeap) pop() heldPkt {
	h := hh.h
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		if l+1 < n && h[l+1].before(&h[l]) {
			l++
		}
		if !h[l].before(&h[i]) {
			break
		}
		h[i], h[l] = h[l], h[i]
		i = l
	}
	hh.h = h
	return top
}

// minID is the lowest (earliest queued) id held; the heap must not be
// empty. It scans the heap: called once per release of several packets
// while others stay held.
func (hh *holdHeap) minID() uint32 {
	m := hh.h[0].id
	for i := 1; i < len(hh.h); i++ {
		if idBefore(hh.h[i].id, m) {
			m = hh.h[i].id
		}
	}
	return m
}

// popDue moves the packets due at or before until to rel, sorted by id,
// and returns it with whether packets stay held and the lowest id of
// those, as appendReleases takes them.
func (hh *holdHeap) popDue(rel []heldPkt, until int64) (out []heldPkt, stillHeld bool, minHeld uint32) {
	rel = rel[:0]
	for len(hh.h) > 0 && hh.h[0].at <= until {
		rel = append(rel, hh.pop())
	}
	if len(rel) == 0 {
		return rel, len(hh.h) > 0, 0
	}
	if len(hh.h) > 0 && len(rel) == 1 {
		// One packet: one message either way; by its exact id, since
		// older packets may stay held (no scan for the lowest).
		return rel, true, rel[0].id
	}
	sortByID(rel)
	if len(hh.h) == 0 {
		return rel, false, 0
	}
	return rel, true, hh.minID()
}

func sortByID(rel []heldPkt) {
	slices.SortFunc(rel, func(a, b heldPkt) int {
		if idBefore(a.id, b.id) {
			return -1
		}
		return 1
	})
}

// popAll moves every held packet to rel, sorted by id.
func (hh *holdHeap) popAll(rel []heldPkt) []heldPkt {
	rel = append(rel[:0], hh.h...)
	hh.h = hh.h[:0]
	sortByID(rel)
	return rel
}
