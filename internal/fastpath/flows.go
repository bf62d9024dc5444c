//go:build linux

package fastpath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// flowChunk is the most flows read from a flow map at once (one
// BPF_MAP_LOOKUP_BATCH): a listing or a count holds that many keys and
// states, whatever the map's size.
const flowChunk = 256

// Flow is one flow of a kernel limit rule's map, as a listing shows it.
type Flow struct {
	// Rule is the index of the rule (in the Spec) whose map holds it.
	Rule int
	// Key is the flow's key as flows.KeyConfig makes it (the rule's
	// Entry.Key.Format prints it).
	Key flows.Key
	// Last is the time of the flow's newest packet, Unix ns.
	Last int64
	// Expired: idle for longer than the rule's flow timeout; its next
	// packet starts it afresh (Left is then a fresh flow's).
	Expired bool
	// Left is what the flow's limiter would accept now, in the rule's
	// cost units (packets, or bytes), as shaper.Limiter.Left.
	Left float64
}

// errNoTable: the rule has no flow map (not a limit rule).
var errNoTable = errors.New("not a kernel limit rule")

// FlowTable is a handle of its own on a kernel limit rule's flow map (a
// duplicate of its descriptor): it stays valid when the Program is closed
// or replaced by a reload, so that a listing or a count runs without
// holding the Program. Close it.
type FlowTable struct {
	// m is the rule's map of flows, small its map of new flows (one
	// packet so far): a listing or a count reads both.
	m, small *ebpf.Map
	rule     int
	e        Entry
}

// FlowTable returns a handle on rule i's flow maps.
func (p *Program) FlowTable(i int) (*FlowTable, error) {
	if i < 0 || i >= len(p.tables) || p.tables[i] == nil || p.news[i] == nil {
		return nil, fmt.Errorf("rule %d: %w", i, errNoTable)
	}
	m, err := p.tables[i].Clone()
	if err != nil {
		return nil, fmt.Errorf("rule %s's flow map: %w", p.spec.Entries[i].Name, err)
	}
	small, err := p.news[i].Clone()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("rule %s's flow map: %w", p.spec.Entries[i].Name, err)
	}
	return &FlowTable{m: m, small: small, rule: i, e: p.spec.Entries[i]}, nil
}

// Close frees the handle (not the maps, while the Program holds them).
func (t *FlowTable) Close() error { return errors.Join(t.m.Close(), t.small.Close()) }

// Flows calls fn with each flow in rule i's map: FlowTable(i).Flows.
func (p *Program) Flows(i int, now int64, max int, fn func(*Flow) error) (int, error) {
	t, err := p.FlowTable(i)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	return t.Flows(now, max, fn)
}

// FlowCount is the number of flows in rule i's map: FlowTable(i).Count.
func (p *Program) FlowCount(i int) (int, error) {
	t, err := p.FlowTable(i)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	return t.Count()
}

// Flows calls fn with each flow in the map, read flowChunk at a time
// (whatever the map's size, Flows holds no more), at most max of them if
// max > 0, and returns the number listed; now (Unix ns) sets Left and
// Expired. fn's Flow is reused: copy it to keep it. An error of fn ends
// the listing with it. The listing is not a snapshot: a flow inserted or
// evicted meanwhile may or may not be listed.
func (t *FlowTable) Flows(now int64, max int, fn func(*Flow) error) (int, error) {
	e := &t.e
	var f Flow
	f.Rule = t.rule
	listed := 0
	each := func(k *fastpathFlowKey, s *fastpathFlowState) error {
		if lockOf(s) == fastpathLockStateLOCK_MOVED {
			return nil // a marker: the flow is in t.m
		}
		f.Key = flows.Key{Src: k.Src, Dst: k.Dst, SrcPort: k.Sport, DstPort: k.Dport, Proto: k.Proto, Family: k.Family, Mode: e.Key.Mode}
		f.Last = seenOf(s)
		f.Expired = e.Timeout > 0 && now-f.Last > e.Timeout
		if f.Expired {
			f.Left = e.Limiter.Capacity()
		} else {
			// Tokens is the token bucket's, or the sliding-window
			// counter's previous count (one word: bpf/common.h).
			st := shaper.StateOf(s.Last, s.Tokens, int64(s.Win), int64(s.Cur), s.Tokens)
			f.Left = e.Limiter.Left(&st, now)
		}
		listed++
		return fn(&f)
	}
	n, err := readFlows(t.m, max, each)
	if err != nil || (max > 0 && n >= max) {
		return listed, err
	}
	rest := 0
	if max > 0 {
		rest = max - n
	}
	_, err = readFlows(t.small, rest, each)
	return listed, err
}

// Count is the number of flows in the maps (read flowChunk at a time: the
// time it takes grows with the maps, the memory does not).
func (t *FlowTable) Count() (int, error) {
	n, err := readFlows(t.m, 0, nil)
	if err != nil {
		return n, err
	}
	m := 0
	_, err = readFlows(t.small, 0, func(_ *fastpathFlowKey, s *fastpathFlowState) error {
		if lockOf(s) != fastpathLockStateLOCK_MOVED {
			m++
		}
		return nil
	})
	return n + m, err
}

// seenOf and lockOf are a flow state's seen time and its lock, which share
// a word (bpf/flowstate.h: the lock in its low LOCK_BITS).
func seenOf(s *fastpathFlowState) int64 { return int64(s.Seen >> fastpathLockWordLOCK_BITS) }

func lockOf(s *fastpathFlowState) fastpathLockState {
	return fastpathLockState(s.Seen & uint64(fastpathLockWordLOCK_MASK))
}

// Entry is the rule the map is of.
func (t *FlowTable) Entry() *Entry { return &t.e }

// readFlows reads m's entries in batches, calling fn (if not nil) with
// each, at most max (> 0) of them, and returns the number read.
func readFlows(m *ebpf.Map, max int, fn func(*fastpathFlowKey, *fastpathFlowState) error) (int, error) {
	keys := make([]fastpathFlowKey, flowChunk)
	vals := make([]fastpathFlowState, flowChunk)
	var cur ebpf.MapBatchCursor
	total := 0
	for {
		want := flowChunk
		if max > 0 {
			want = min(want, max-total)
		}
		if want <= 0 {
			return total, nil
		}
		n, err := m.BatchLookup(&cur, keys[:want], vals[:want], nil)
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			return total, fmt.Errorf("reading a flow map: %w", err)
		}
		for j := range n {
			if fn != nil {
				if err := fn(&keys[j], &vals[j]); err != nil {
					return total + j, err
				}
			}
		}
		total += n
		if done {
			return total, nil
		}
	}
}
