package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/shaper"
)

// Flow listings.
//
// The engine belongs to the queue goroutine that holds it (shared), so a
// listing (packetshaper flows) is copied out there, in chunks, between
// batches: the control server hands the engine's queues a listing; the
// queue that holds the engine, at the end of each batch
// (one atomic load per batch while none is asked for), copies the next
// flows of its engine (Engine.AppendFlows, from a cursor over the tables'
// entry slots) into a free chunk, at most listChunk slots' worth, and hands
// it back; the server formats and sends it while the worker decides
// packets. Between batches the packets wait at most one chunk's copy
// (measured: BenchmarkListChunk). When no traffic flows, the server wakes
// the queue's goroutine (nfq's Queue.Wake) and it fills every free chunk
// from its Idle hook, so a listing does not wait for traffic.
//
// A listing is not a snapshot: a flow created or evicted meanwhile may or
// may not appear, and one evicted and created again may appear twice
// (counted afresh the second time); every flow held all along appears
// once. A reload (SIGHUP) during a listing ends it with an error.

const (
	// listChunk bounds the entry slots a worker copies out at a time.
	listChunk = 256
	// listBufs is the number of chunks in flight between a worker and
	// the server.
	listBufs = 4
	// rewakeEvery: the server wakes an idle queue again when no chunk
	// came for this long (a wake-up can come too early; nfq.Queue.Wake).
	rewakeEvery = 20 * time.Millisecond
)

// errReloaded ends a listing that a reload interrupted.
var errReloaded = errors.New("the policy was reloaded during the listing; list again")

// listing is a flow listing in progress on one engine (shared). The server makes it
// and waits on full; the worker fills the chunks it takes from free. The
// fields above the line are the worker's once the listing is handed to it.
type listing struct {
	rule string // only this rule's flows, if not empty

	eng   *shaper.Engine // the engine listed (the first chunk sets it)
	rules []ruleInfo     // eng's rules
	ri    int            // cursor: rule and entry slot
	slot  int
	only  bool // ri is the one rule listed

	// ----
	free      chan []shaper.FlowInfo
	full      chan flowChunk
	cancelled atomic.Bool
}

// ruleInfo is what the server needs of a rule to show its flows.
type ruleInfo struct {
	name string
	key  flows.KeyConfig
	unit string
	// shadow, marks: what the rule does with packets over its limit
	// (accepts them as shadow-dropped, or marked), which its flows count
	// as dropped.
	shadow, marks bool
}

// flowChunk is a chunk of a listing: flows copied at the engine's time now.
type flowChunk struct {
	flows []shaper.FlowInfo
	now   int64
	rules []ruleInfo
	done  bool
	err   error
}

func newListing(rule string) *listing {
	l := &listing{rule: rule, free: make(chan []shaper.FlowInfo, listBufs), full: make(chan flowChunk, listBufs)}
	for range listBufs {
		l.free <- make([]shaper.FlowInfo, 0, listChunk)
	}
	return l
}

// list copies the next flows of the listing in progress, if any, into up to
// chunks free chunks. It runs on the queue's goroutine: at the end of a
// batch (one chunk) and when idle (all it can).
func (sh *shared) list(now int64, chunks int) {
	l := sh.listing.Load()
	if l == nil {
		return
	}
	if l.cancelled.Load() {
		sh.listing.CompareAndSwap(l, nil) // not a listing the server began since
		return
	}
	if l.eng == nil {
		l.eng = sh.eng
		l.rules = make([]ruleInfo, sh.eng.NumRules())
		for i := range l.rules {
			r := sh.eng.Rule(i)
			l.rules[i] = ruleInfo{name: r.Name, key: r.Limit.Key, unit: unit(r.Limit.Bytes), shadow: r.Shadow, marks: r.MarkExceeded}
			if r.Name == l.rule {
				l.ri, l.only = i, true
			}
		}
		if l.rule != "" && !l.only {
			sh.endListing(l, now, errNoRule(l.rule))
			return
		}
	}
	for ; chunks > 0; chunks-- {
		var buf []shaper.FlowInfo
		select {
		case buf = <-l.free:
		default:
			return // the server has every chunk: at a later batch
		}
		if sh.eng != l.eng {
			l.free <- buf
			sh.endListing(l, now, errReloaded)
			return
		}
		buf = buf[:0]
		done := false
		// Each rule visited costs a slot, so that thousands of rules
		// without flows are visited a chunk at a time too.
		for budget := listChunk; budget > 0 && !done; {
			n := len(buf)
			var next int
			buf, next = sh.eng.AppendFlows(buf, l.ri, l.slot, min(budget, cap(buf)-len(buf)), now)
			if next >= 0 {
				budget -= next - l.slot
				l.slot = next
				if len(buf) == cap(buf) {
					break
				}
				continue
			}
			budget -= len(buf) - n + 1
			l.ri, l.slot = l.ri+1, 0
			done = l.only || l.ri == len(l.rules)
		}
		l.full <- flowChunk{flows: buf, now: now, rules: l.rules, done: done}
		if done {
			sh.listing.CompareAndSwap(l, nil)
			return
		}
	}
}

// endListing hands the server the listing's last chunk, with err.
func (sh *shared) endListing(l *listing, now int64, err error) {
	sh.listing.CompareAndSwap(l, nil)
	l.full <- flowChunk{now: now, done: true, err: err}
}

func unit(bytes bool) string {
	if bytes {
		return "bytes"
	}
	return countname.Packets
}

func errNoRule(name string) error { return fmt.Errorf("no rule %q in the policy", name) }

// errStopped ends a listing of a queue that stopped.
var errStopped = errors.New("packetshaper is stopping")

// listFlows runs a listing of the engine sh, calling emit for each flow
// (Flow.Queue is the first of the queues sh serves: the flow is theirs).
// Listings of an engine take turns.
func (sh *shared) listFlows(ctx context.Context, rule string, emit func(*control.Flow) error) error {
	select {
	case sh.listTurn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-sh.done:
		return errStopped
	}
	defer func() { <-sh.listTurn }()
	l := newListing(rule)
	defer l.cancelled.Store(true) // the worker drops it at its next look, if it still has it
	sh.listing.Store(l)
	sh.wake()
	t := time.NewTicker(rewakeEvery)
	defer t.Stop()
	var f control.Flow
	for {
		var c flowChunk
		select {
		case c = <-l.full:
		case <-t.C:
			sh.wake()
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-sh.done:
			return errStopped
		}
		if c.err != nil {
			return c.err
		}
		for i := range c.flows {
			fi := &c.flows[i]
			r := &c.rules[fi.Rule]
			f = control.Flow{
				Queue: sh.ws[0].queue, Rule: r.name, Path: pathQueue, Key: r.key.Format(fi.Key),
				Packets: fi.Packets, Accepted: fi.Accepted, Dropped: fi.Dropped,
				Left: fi.Left, Unit: r.unit, IdleSecs: float64(max(c.now-fi.Last, 0)) / 1e9, Expired: fi.Expired,
			}
			// Over the limit of a shadow or marking rule: accepted, and
			// counted as the rule's counters count them.
			switch {
			case r.shadow:
				f.Accepted, f.ShadowDropped, f.Dropped = f.Packets, f.Dropped, 0
			case r.marks:
				f.Accepted, f.Marked, f.Dropped = f.Packets, f.Dropped, 0
			}
			if err := emit(&f); err != nil {
				return err
			}
		}
		if c.done {
			return nil
		}
		l.free <- c.flows
		sh.wake() // the worker may be waiting for packets: have it fill this chunk
	}
}
