package daemon

import (
	"sync"
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

// shared is the one engine of a set of queues (the daemon's: every queue
// it serves), so that a key has one bucket whichever queue the kernel
// delivers its packets to (--queue-balance hashes addresses and protocol,
// CPU fanout the CPU: one source's packets spread over the queues).
//
// The engine is used by one goroutine at a time, as shaper.Engine asks: the
// queue goroutine that holds mu, taken once per batch (decide) and on the
// queue's idle turns (idle, which skips its turn when another queue holds
// it). A batch is up to hundreds of packets and the engine decides one in
// tens of ns, so the lock is amortised (BenchmarkDecideQueues). What the
// logger and the metrics need from the engine is copied into an immutable
// snapshot under mu, at most every snapEvery (and when idle), and published
// with an atomic store.
//
// Packets a shaping rule delays are held by the queue that received them
// (nfq, Verdict.At), not by the engine: they keep their departure times
// whatever engine decides the next packets (a reload). Before each batch
// the engine learns how many more the batch's queue can hold (HoldRoom), so
// that it drops, uncharged, a packet it would delay beyond that.
//
// A reload (SIGHUP) stores a new engine in pending, made by Engine.Reload
// from the current one so that unchanged rules share its state; the next
// queue to take mu swaps it in before deciding its batch, so no queue
// decides with the old engine once one has used the new. The swap closes
// the generation's channel (install returns it), so a reload waits for it
// without polling.
type shared struct {
	ws []*worker // its queues' workers, in the order of the queues

	mu       sync.Mutex
	eng      *shaper.Engine // under mu
	lastSnap int64          // under mu

	cur     atomic.Pointer[shaper.Engine] // eng, for Reload on another goroutine
	pending atomic.Pointer[generation]
	off     offloader // nil without --offload
	snap    atomic.Pointer[snapshot]
	fast    atomic.Pointer[fastCounts] // the kernel fast path's counts (fastpath.go)

	// Flow listings (listing.go): the one in progress, the turn of the
	// server's listings, and wake, which has the queues' goroutines call
	// idle soon (nfq.Queue.Wake; a no-op without a queue).
	listing  atomic.Pointer[listing]
	listTurn chan struct{}
	wake     func()
	// done is closed when every queue's Run has returned; running counts
	// those that have not.
	done    chan struct{}
	running atomic.Int32
}

// generation is an engine install handed to the queues: swapped is closed
// once a queue has swapped it, or a later one, in.
type generation struct {
	eng     *shaper.Engine
	swapped chan struct{} // nil: nobody waits (tests)
	// prev was pending when this one replaced it, never swapped in: it
	// counts as swapped with this one.
	prev *generation
}

// worker is one queue, deciding its batches with the engine it shares with
// the daemon's other queues (shared, embedded: w.eng is that engine).
type worker struct {
	*shared
	queue uint16
	q     nfqQueue
	// failClosed: the queue drops what does not fit (nothing passes).
	failClosed bool

	meta shaper.Meta // Meta.Queue is this queue
	// punt: the fast path's punt mark, cleared before the engine reads
	// the mark (its mark matches are the kernel's).
	punt uint32
	// conntrack: the queue gets each packet's connection state; askedCt:
	// it asked for them (the policy at start had a ct-state match).
	conntrack, askedCt bool
	dec                shaper.Decision

	// stopped is closed when the queue's Run has returned (stop).
	stopped chan struct{}
}

// snapshot is what an engine had counted at one time.
type snapshot struct {
	shaper.Stats
	rules  []ruleSnap
	totals []totalSnap
	delays shaper.DelayStats // of the packets shaping rules delayed
	// delayHist is delays over delayBounds.
	delayHist nfq.LatencyHistogram
}

type ruleSnap struct {
	name string
	rule shaper.Rule // its settings
	// path is where the rule runs: pathKernel, or pathQueue ("": not
	// set, the queue's).
	path string
	shaper.RuleStats
}

type totalSnap struct {
	total shaper.Total
	shaper.TotalStats
}

// pathLabel is where the rule runs: pathKernel or pathQueue.
func (r *ruleSnap) pathLabel() string {
	if r.path == "" {
		return pathQueue
	}
	return r.path
}

const snapEvery = int64(100 * time.Millisecond)

// newEngine returns the engine eng serving queues, with their workers.
func newEngine(queues []uint16, eng *shaper.Engine) *shared {
	sh := &shared{eng: eng, listTurn: make(chan struct{}, 1), done: make(chan struct{})}
	ws := make([]*worker, len(queues))
	for i, q := range queues {
		ws[i] = &worker{shared: sh, queue: q, stopped: make(chan struct{})}
		ws[i].meta.Queue = q
	}
	sh.ws = ws
	sh.wake = func() {}
	sh.running.Store(int32(len(ws)))
	sh.cur.Store(eng)
	sh.snapshot(0)
	return sh
}

// stop records that the queue's Run has returned: its stopped is closed,
// and the engine's done once every queue sharing it has stopped. The final
// snapshot is taken first.
func (w *worker) stop(now int64) {
	w.mu.Lock()
	w.snapshot(now)
	w.mu.Unlock()
	close(w.stopped)
	if w.running.Add(-1) == 0 {
		close(w.done)
	}
}

// ctState is packet p's connection state as the engine takes it: 0
// (unknown) when the queue does not get states (conntrack false); invalid
// or untracked, which the kernel does not tell apart, when it sent none.
func ctState(p *nfq.Packet, conntrack bool) shaper.CtState {
	switch {
	case !conntrack:
		return 0
	case !p.HasCt:
		return shaper.CtInvalid | shaper.CtUntracked
	}
	switch p.CtInfo {
	case nfq.CtNew:
		return shaper.CtNew
	case nfq.CtEstablished, nfq.CtEstablishedReply:
		return shaper.CtEstablished
	case nfq.CtRelated, nfq.CtRelatedReply:
		return shaper.CtRelated
	case nfq.CtUntracked:
		return shaper.CtUntracked
	}
	return shaper.CtInvalid
}

// decide is the nfq.Handler: the engine decides, nfq answers (and holds
// what the engine delays until its departure). It does not allocate, but to
// publish a snapshot (every snapEvery) and to copy out a chunk of a flow
// listing (while one is asked for).
func (w *worker) decide(batch []nfq.Packet, verdicts []nfq.Verdict, now int64) {
	sh := w.shared
	sh.mu.Lock()
	if sh.pending.Load() != nil {
		sh.swap(now)
	}
	eng := sh.eng
	if w.q != nil {
		eng.SetHoldRoom(w.q.HoldRoom())
	}
	for i := range batch {
		p := &batch[i]
		w.meta.Mark, w.meta.InIf, w.meta.OutIf, w.meta.Len = p.Mark&^w.punt, p.InDev, p.OutDev, p.Len
		w.meta.UID, w.meta.GID, w.meta.HasOwner = p.UID, p.GID, p.HasOwner
		w.meta.CtState = ctState(p, w.conntrack)
		eng.DecidePacket(p.Data, &w.meta, now, &w.dec)
		switch {
		case w.dec.Verdict == shaper.Drop:
			verdicts[i].Action = nfq.Drop
		case w.dec.SetMark:
			// Computed from the mark without the punt bit.
			verdicts[i].SetMark, verdicts[i].Mark = true, w.dec.Mark
		case p.Mark&w.punt != 0:
			// The punt bit leaves with the verdict: routing,
			// fwmark rules and CONNMARK after us never see it.
			verdicts[i].SetMark, verdicts[i].Mark = true, p.Mark&^w.punt
		}
		verdicts[i].At = w.dec.Depart
	}
	if sh.off != nil {
		eng.TakeOffloads(sh.off.Add)
	}
	if now-sh.lastSnap >= snapEvery {
		sh.snapshot(now)
	}
	if sh.listing.Load() != nil {
		sh.list(now, 1)
	}
	sh.mu.Unlock()
}

// idle is nfq's Idle hook: counters stay current when no traffic flows,
// and a flow listing goes on (the server wakes the queues for it). It
// skips its turn when another queue holds the engine: that one does it.
func (w *worker) idle(now int64) {
	sh := w.shared
	if !sh.mu.TryLock() {
		return
	}
	defer sh.mu.Unlock()
	if sh.pending.Load() != nil {
		sh.swap(now)
	}
	if now-sh.lastSnap >= snapEvery {
		sh.snapshot(now)
	}
	if sh.listing.Load() != nil {
		sh.list(now, listBufs)
	}
}

// swap replaces the engine with the pending one (see shared); under mu.
func (sh *shared) swap(now int64) {
	old := sh.eng
	g := sh.pending.Swap(nil)
	sh.eng = g.eng
	sh.eng.Retire(old) // the evictions of retired rules still count
	sh.cur.Store(sh.eng)
	sh.lastSnap = now - snapEvery // the snapshot follows at this batch's end
	for ; g != nil; g = g.prev {
		if g.swapped != nil {
			close(g.swapped)
		}
	}
}

// install hands the queues an engine made from their latest one (the
// pending one, if a reload has not been swapped in yet, else the current
// one) by build: so that two reloads in quick succession chain, the second
// built on the first, whatever a queue swaps meanwhile. It returns build's
// result and a channel closed once a queue has swapped the new engine (or
// a later one) in.
func (sh *shared) install(build func(base *shaper.Engine) (*shaper.Engine, []string, error)) ([]string, <-chan struct{}, error) {
	for {
		pend := sh.pending.Load()
		base := sh.cur.Load()
		if pend != nil {
			base = pend.eng
		}
		ne, kept, err := build(base)
		if err != nil {
			return nil, nil, err
		}
		// Fails if a queue swapped pend in meanwhile: build again
		// from it (now current).
		g := &generation{eng: ne, swapped: make(chan struct{}), prev: pend}
		if sh.pending.CompareAndSwap(pend, g) {
			return kept, g.swapped, nil
		}
	}
}

// snapshot publishes the engine's counters; under mu (or before the
// queues run).
func (sh *shared) snapshot(now int64) {
	s := &snapshot{Stats: sh.eng.Stats(), rules: make([]ruleSnap, sh.eng.NumRules()), delays: sh.eng.Delays()}
	n, sum, cum := sh.eng.DelayHistogram(delayBoundsNS)
	s.delayHist = nfq.LatencyHistogram{Count: n, Sum: time.Duration(sum), Cumulative: cum}
	for i := range s.rules {
		r := sh.eng.Rule(i)
		s.rules[i] = ruleSnap{name: r.Name, rule: r, RuleStats: sh.eng.RuleStats(i)}
	}
	for i := range sh.eng.NumTotals() {
		s.totals = append(s.totals, totalSnap{total: sh.eng.Total(i), TotalStats: sh.eng.TotalStats(i)})
	}
	addFast(&sh.fast, s)
	sh.snap.Store(s)
	sh.lastSnap = now
}

// label names the queues the engine serves, as the metrics' queue label
// and the flag have them: "0", "20-23".
func (sh *shared) label() string {
	qs := make([]uint16, len(sh.ws))
	for i, w := range sh.ws {
		qs[i] = w.queue
	}
	return nfq.FormatQueues(qs)
}
