package daemon

import (
	"sync/atomic"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// offloader is what a worker hands the flows to hold to their rule's limit
// in the kernel to (offload.Offloader); Add must not block or allocate.
type offloader interface {
	Add(k flows.Key, l shaper.OffloadLimit)
}

// worker is one queue with its own engine. The engine is used only by the
// queue's Run goroutine; what the logger and the metrics need from it is
// copied into an immutable snapshot there, at most every snapEvery (and
// when the queue is idle), and published with an atomic store.
//
// Packets a shaping rule delays are held by the queue (nfq, Verdict.At),
// not by the engine: they belong to the queue and keep their departure
// times whatever engine decides the next packets (a reload). Before each
// batch the engine learns how many more the queue can hold (HoldRoom), so
// that it drops, uncharged, a packet it would delay beyond that.
//
// A reload (SIGHUP) stores a new engine in pending, made by Engine.Reload
// from the current one so that unchanged rules share its state; decide swaps
// it in at the start of its next batch, on the queue's goroutine, so the
// per-packet path takes no lock: one atomic load per batch.
type worker struct {
	queue   uint16
	q       nfqQueue
	eng     *shaper.Engine                // Run's goroutine only
	cur     atomic.Pointer[shaper.Engine] // eng, for Reload on another goroutine
	pending atomic.Pointer[shaper.Engine]
	off     offloader // nil without --offload
	// failClosed: the queue drops what does not fit (nothing passes).
	failClosed bool

	meta shaper.Meta
	dec  shaper.Decision

	lastSnap int64
	snap     atomic.Pointer[snapshot]

	// Flow listings (listing.go): the one in progress, the turn of the
	// server's listings, and wake, which has the queue's goroutine call
	// idle soon (nfq.Queue.Wake; a no-op without a queue).
	listing  atomic.Pointer[listing]
	listTurn chan struct{}
	wake     func()
	// stopped is closed when the queue's Run has returned.
	stopped chan struct{}
}

// snapshot is what a worker's engine had counted at one time.
type snapshot struct {
	shaper.Stats
	rules  []ruleSnap
	delays shaper.DelayStats // of the packets shaping rules delayed
}

type ruleSnap struct {
	name string
	rule shaper.Rule // its settings
	shaper.RuleStats
}

const snapEvery = int64(100 * time.Millisecond)

func newWorker(queue uint16, eng *shaper.Engine) *worker {
	w := &worker{queue: queue, eng: eng, listTurn: make(chan struct{}, 1), wake: func() {}, stopped: make(chan struct{})}
	w.meta.Queue = queue
	w.cur.Store(eng)
	w.snapshot(0)
	return w
}

// decide is the nfq.Handler: the engine decides, nfq answers (and holds
// what the engine delays until its departure). It does not allocate, but to
// publish a snapshot (every snapEvery) and to copy out a chunk of a flow
// listing (while one is asked for).
func (w *worker) decide(batch []nfq.Packet, verdicts []nfq.Verdict, now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	if w.q != nil {
		w.eng.SetHoldRoom(w.q.HoldRoom())
	}
	for i := range batch {
		p := &batch[i]
		w.meta.Mark, w.meta.InIf, w.meta.OutIf = p.Mark, p.InDev, p.OutDev
		w.eng.DecidePacket(p.Data, &w.meta, now, &w.dec)
		switch {
		case w.dec.Verdict == shaper.Drop:
			verdicts[i].Action = nfq.Drop
		case w.dec.SetMark:
			verdicts[i].SetMark, verdicts[i].Mark = true, w.dec.Mark
		}
		verdicts[i].At = w.dec.Depart
	}
	if w.off != nil {
		w.eng.TakeOffloads(w.off.Add)
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
	if w.listing.Load() != nil {
		w.list(now, 1)
	}
}

// idle is nfq's Idle hook: counters stay current when no traffic flows,
// and a flow listing goes on (the server wakes the queue for it).
func (w *worker) idle(now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
	if w.listing.Load() != nil {
		w.list(now, listBufs)
	}
}

// swap replaces the engine with the pending one (see worker).
func (w *worker) swap(now int64) {
	old := w.eng
	w.eng = w.pending.Swap(nil)
	w.eng.Retire(old) // the evictions of retired rules still count
	w.cur.Store(w.eng)
	w.lastSnap = now - snapEvery // the snapshot follows at this batch's end
}

// install hands the worker an engine made from its latest one (the pending
// one, if a reload has not been swapped in yet, else the current one) by
// make: so that two reloads in quick succession chain, the second built on
// the first, whatever the worker swaps meanwhile. It returns make's result.
func (w *worker) install(make func(base *shaper.Engine) (*shaper.Engine, []string, error)) ([]string, error) {
	for {
		pend := w.pending.Load()
		base := pend
		if base == nil {
			base = w.cur.Load()
		}
		ne, kept, err := make(base)
		if err != nil {
			return nil, err
		}
		// Fails if the worker swapped pend in meanwhile: build again
		// from it (now current).
		if w.pending.CompareAndSwap(pend, ne) {
			return kept, nil
		}
	}
}

func (w *worker) snapshot(now int64) {
	s := &snapshot{Stats: w.eng.Stats(), rules: make([]ruleSnap, w.eng.NumRules()), delays: w.eng.Delays()}
	for i := range s.rules {
		r := w.eng.Rule(i)
		s.rules[i] = ruleSnap{name: r.Name, rule: r, RuleStats: w.eng.RuleStats(i)}
	}
	w.snap.Store(s)
	w.lastSnap = now
}
