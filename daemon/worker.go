package daemon

import (
	"sync/atomic"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// offloader is what a worker hands the flows to drop in the kernel to
// (offload.Offloader); Add must not block or allocate.
type offloader interface{ Add(k flows.Key) }

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
	q       *nfq.Queue
	eng     *shaper.Engine                // Run's goroutine only
	cur     atomic.Pointer[shaper.Engine] // eng, for Reload on another goroutine
	pending atomic.Pointer[shaper.Engine]
	off     offloader // nil without --offload

	meta shaper.Meta
	dec  shaper.Decision

	lastSnap int64
	snap     atomic.Pointer[snapshot]
}

// snapshot is what a worker's engine had counted at one time.
type snapshot struct {
	shaper.Stats
	rules  []ruleSnap
	delays shaper.DelayStats // of the packets shaping rules delayed
}

type ruleSnap struct {
	name string
	shaper.RuleStats
}

const snapEvery = int64(100 * time.Millisecond)

func newWorker(queue uint16, eng *shaper.Engine) *worker {
	w := &worker{queue: queue, eng: eng}
	w.meta.Queue = queue
	w.cur.Store(eng)
	w.snapshot(0)
	return w
}

// decide is the nfq.Handler: the engine decides, nfq answers (and holds
// what the engine delays until its departure). It does not allocate, but to
// publish a snapshot (every snapEvery).
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
}

// idle is nfq's Idle hook: counters stay current when no traffic flows.
func (w *worker) idle(now int64) {
	if w.pending.Load() != nil {
		w.swap(now)
	}
	if now-w.lastSnap >= snapEvery {
		w.snapshot(now)
	}
}

// swap replaces the engine with the pending one (see worker).
func (w *worker) swap(now int64) {
	w.eng = w.pending.Swap(nil)
	w.cur.Store(w.eng)
	w.lastSnap = now - snapEvery // the snapshot follows at this batch's end
}

func (w *worker) snapshot(now int64) {
	s := &snapshot{Stats: w.eng.Stats(), rules: make([]ruleSnap, w.eng.NumRules()), delays: w.eng.Delays()}
	for i := range s.rules {
		s.rules[i] = ruleSnap{name: w.eng.Rule(i).Name, RuleStats: w.eng.RuleStats(i)}
	}
	w.snap.Store(s)
	w.lastSnap = now
}
