// Package replay runs packetshaper's engine over pcap and pcapng captures,
// with each packet's capture timestamp as the engine's clock, so a policy
// can be tried, and every behaviour of the shaper tested, offline and
// deterministically.
//
// A Replayer reads captures record by record (gopacket's pcapgo, zero
// copy), finds the IP header under the link layer (Decap), asks the
// shaper.Engine for a verdict and writes the optional per-packet outputs.
// Memory is bounded by the engine's flow table, not by the capture: the
// per-packet path does not allocate, and per-flow figures come from the
// flow table at the end (flows that were evicted or expired are folded
// into the totals only). Beside it, the packets shaping rules hold take at
// most MaxHeldBytes (their copies for Accepted at most twice that, and as
// much again in reusable buffers), and pcapng blocks that a reader would
// keep for the whole section are never given to it (ngFilter).
package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/heap"
	"github.com/packetshaper/packetshaper/shaper"
)

// Options are a Replayer's optional outputs. The zero value writes none.
type Options struct {
	// Verdicts, if not nil, receives one line per record in capture
	// order: "<index> <ACCEPT|DROP>\n", the index starting at 1 and
	// counting every record (non-IP ones included) across all files; a
	// packet a shaping rule delays is "<index> ACCEPT +<delay in ns>\n".
	Verdicts io.Writer
	// Accepted and Dropped, if not nil, receive pcap files (nanosecond
	// timestamps) of the accepted and dropped records, as captured: same
	// bytes, link type and timestamps, except that a packet a shaping rule
	// delays is written with its departure time as its timestamp, in
	// departure order among the accepted ones (it is held, copied, until
	// the capture's clock passes its departure, or the end: what is held
	// is at most what live would hold, MaxHeld packets and MaxHeldBytes).
	// A pcap file holds one link type, so
	// a record whose link type differs from the first one written is an
	// error, unless AcceptedNg or DroppedNg make that output pcapng, which
	// gets one interface per link type.
	Accepted, Dropped     io.Writer
	AcceptedNg, DroppedNg bool
	// Progress, if not nil, is called every ProgressEvery records and once
	// at the end of each file.
	Progress func(Progress)
	// IfaceID, if not nil, gives the id that the engine's classifier uses
	// for a capture interface's name (pcapng if_name; policy.Compiled's
	// IfaceID): the packet's input and output interface in replay are both
	// the interface it was captured on. pcap records have no interface: 0.
	IfaceID func(name string) uint32
	// Queue is the NFQUEUE number the packets are taken to come from, for
	// rules that match queues.
	Queue uint16
	// Timeline, if true, counts packets per rule over capture time
	// (Replayer.Timeline), for a report: at most TimelineMaxBuckets
	// buckets of at least TimelineMinWidth, allocated once.
	Timeline bool
	// MaxHeld is live's --max-held: the most packets shaping rules hold
	// at once for a later departure (those whose departure is after the
	// capture's clock); a packet a shaping rule would delay beyond it is
	// dropped, uncharged, as shape_overflow, as live drops it
	// (shaper.Engine.SetHoldRoom). 0: no bound on the count; negative:
	// none held. Whatever it is, what is held is also bounded by
	// MaxHeldBytes.
	MaxHeld int
}

// MaxHeldBytes bounds what the packets shaping rules hold at once cost
// replay: their captured bytes plus heldOverhead each. A packet a shaping
// rule would delay beyond it is dropped like one beyond Options.MaxHeld,
// whether or not the packets are written (--write-accepted keeps a copy
// of each held packet until its departure; the verdicts do not depend on
// the outputs). 1024 packets held (live's default --max-held) reach it
// only at 32 KiB each on average: GRO-sized records.
const MaxHeldBytes = 32 << 20

// heldOverhead is what a held packet costs beside its bytes: its heap
// entry (heldRec) and its buffer's rounding.
const heldOverhead = 128

// A Replayer's Timeline has one row per rule of the engine, in the
// policy's order, then these rows, numbered from NumRules.
const (
	RowUnmatched = iota // IP packets no rule matched
	RowMalformed        // records whose IP header is invalid
	RowNonIP            // records that carry no IP packet
	ExtraRows           // how many rows follow the rules'
)

// ProgressEvery is how many records pass between Progress calls.
const ProgressEvery = 1 << 16

// Progress reports how far a file's replay is.
type Progress struct {
	File       string
	Read, Size int64 // bytes of the file read so far, and its size (0 if unknown)
	Packets    uint64
}

// Summary counts what a Replayer did. Packets = Accepted + Dropped;
// NonIP records are counted in Packets and Accepted.
type Summary struct {
	Packets, Accepted, Dropped uint64
	// Unmatched: packets no rule matched (accepted). NoPorts: packets
	// whose ports could not be read, keyed by address and protocol.
	Unmatched, NoPorts uint64
	// Malformed: records whose link layer says IP but whose IP packet does
	// not decode (they got the engine's Malformed verdict).
	Malformed uint64
	// NonIP: records that carry no IP packet (ARP, LLDP, …): accepted,
	// never given to the engine.
	NonIP uint64
	// Delayed: packets shaping rules accepted later than their arrival (in
	// Accepted); ShapeOverflow: packets they dropped because their queue
	// was full (in Dropped); Delays: how long the delayed ones waited.
	Delayed, ShapeOverflow uint64
	Delays                 shaper.DelayStats
	// Flows is the number of flows in the engine's table at the end;
	// FlowsSeen the number of flow table insertions (distinct flows, when
	// nothing was evicted or expired). Evictions: flows pushed out of a
	// full table; Expired: flows forgotten after the idle timeout.
	Flows, FlowsSeen, Evictions, Expired uint64
	// NoOwner: packets of rules keyed by uid or gid, which a capture
	// cannot give (pcapng records carry no socket owner): each such rule
	// put them all in its one "no owner" flow, as the live path does with
	// forwarded and incoming packets. (A uid or gid match matches no
	// replayed packet.)
	NoOwner uint64
	// First and Last are the smallest and largest capture timestamps
	// (nanoseconds since the Unix epoch); both 0 when there were no records.
	First, Last int64
}

// Duration is the capture time the replayed records span.
func (s *Summary) Duration() time.Duration { return time.Duration(s.Last - s.First) }

// FlowSummary is one flow's counts, from the flow table, as its rule's
// counters count them: Packets = Accepted + Dropped. The packets over the
// limit of a shadow rule are accepted and counted in ShadowDropped, not in
// Dropped; those of a rule that marks them, in Marked.
type FlowSummary struct {
	Rule                       int // index of the engine's rule whose table holds it
	Key                        flows.Key
	Flow                       string // Engine.FlowName(Key)
	Packets, Accepted, Dropped uint64
	ShadowDropped, Marked      uint64
}

// Replayer replays captures through one engine as one stream: several
// files share the engine, the record index and the outputs. Not safe for
// concurrent use.
type Replayer struct {
	eng  *shaper.Engine
	opts Options
	meta shaper.Meta
	dec  shaper.Decision
	// ifIDs caches IfaceID per pcapng interface index of the file being
	// replayed (-1: not looked up yet).
	ifIDs    []int64
	verdicts *bufio.Writer
	acc, drp pcapOut
	tl       *Timeline // nil without Options.Timeline
	nRules   int
	kinds    []overKind // of each rule, once the flows are listed
	// held are the delayed packets waiting for their departure (to be
	// written to Accepted, when it is set: then they hold a copy of the
	// record, else only their departure and size), a min-heap by departure
	// (then arrival). heldBytes is their cost against MaxHeldBytes. Copies'
	// buffers come from and go back to free, by size class (capacity
	// 1<<k), with freeBytes of capacity there, at most MaxHeldBytes.
	held      heap.Heap[heldRec]
	heldBytes int
	free      [bits.UintSize][][]byte
	freeBytes int
	heldSeq   uint64
	index     uint64 // records so far, over all files
	nonIP     uint64
	noOwner   uint64
	first     int64
	last      int64
	any       bool
}

// New returns a Replayer that asks eng for verdicts.
func New(eng *shaper.Engine, o Options) *Replayer {
	r := &Replayer{eng: eng, opts: o, held: heap.New((*heldRec).before, 0)}
	r.meta.Queue = o.Queue
	r.nRules = eng.NumRules()
	if o.Timeline {
		r.tl = NewTimeline(r.nRules+ExtraRows, TimelineMinWidth, TimelineMaxBuckets)
	}
	if o.Verdicts != nil {
		r.verdicts = bufio.NewWriterSize(o.Verdicts, 64<<10)
	}
	if o.Accepted != nil {
		r.acc.init(o.Accepted, "accepted", o.AcceptedNg)
	}
	if o.Dropped != nil {
		r.drp.init(o.Dropped, "dropped", o.DroppedNg)
	}
	return r
}

// ReplayFile opens the capture file name ("-": standard input) and replays
// it. Records before any damage in the file are replayed and counted; the
// error then names the file, the record's index in the file and what is
// wrong.
func (r *Replayer) ReplayFile(name string) error {
	if name == "-" {
		return r.Replay("stdin", os.Stdin, 0)
	}
	f, err := os.Open(name)
	if err != nil {
		return err // *PathError: "open NAME: reason"
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		if st.IsDir() {
			return fmt.Errorf("%s: is a directory, not a capture", name)
		}
		size = st.Size()
	}
	return r.Replay(name, f, size)
}

// Replay replays the capture read from src; name is used in errors and
// progress reports, size (0 if unknown) in progress reports.
func (r *Replayer) Replay(name string, src io.Reader, size int64) error {
	rd, err := NewReader(src)
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	r.ifIDs = r.ifIDs[:0]
	var n uint64 // records of this file
	for {
		data, ci, lt, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.progress(name, rd, size, n)
			return fmt.Errorf("%s: packet %d: %v", name, n+1, err)
		}
		n++
		r.meta.InIf = r.ifaceID(rd, ci.InterfaceIndex)
		r.meta.OutIf = r.meta.InIf
		if err := r.packet(data, &ci, lt); err != nil {
			return fmt.Errorf("%s: packet %d: %v", name, n, err)
		}
		if n%ProgressEvery == 0 {
			r.progress(name, rd, size, n)
		}
	}
	r.progress(name, rd, size, n)
	return nil
}

// ifaceID returns the classifier's id for the file's interface i, looking
// its name up once per file.
func (r *Replayer) ifaceID(rd *Reader, i int) uint32 {
	if r.opts.IfaceID == nil || i < 0 {
		return 0
	}
	for len(r.ifIDs) <= i {
		r.ifIDs = append(r.ifIDs, -1)
	}
	if r.ifIDs[i] < 0 {
		r.ifIDs[i] = int64(r.opts.IfaceID(rd.InterfaceName(i)))
	}
	return uint32(r.ifIDs[i])
}

func (r *Replayer) progress(name string, rd *Reader, size int64, n uint64) {
	if r.opts.Progress != nil {
		r.opts.Progress(Progress{File: name, Read: rd.BytesRead(), Size: size, Packets: n})
	}
}

// packet decides one record and writes its outputs. It does not allocate.
func (r *Replayer) packet(data []byte, ci *gopacket.CaptureInfo, lt layers.LinkType) error {
	r.index++
	now := Nanos(ci)
	if !r.any {
		r.first, r.last, r.any = now, now, true
	} else if now < r.first {
		r.first = now
	} else if now > r.last {
		r.last = now
	}
	// The packets held so far that depart by now leave first (to
	// Accepted, when it is set), and make room.
	if err := r.release(now); err != nil {
		return err
	}
	v := shaper.Accept
	var depart int64
	if ip, ok := Decap(lt, data); ok {
		r.eng.SetHoldRoom(r.holdRoom(len(data)))
		// The IP packet's real length when the record was cut (a snap
		// length): its original length less the link-layer bytes before
		// the IP header (ip is a subslice of data: the difference of
		// their capacities is its offset). A whole record passes 0, so
		// the IP header's length is charged, not link-layer padding.
		r.meta.Len = 0
		if ci.Length > len(data) {
			r.meta.Len = ci.Length - (cap(data) - cap(ip))
		}
		r.eng.DecidePacket(ip, &r.meta, now, &r.dec)
		v, depart = r.dec.Verdict, r.dec.Depart
		if r.dec.Key.NoOwner {
			r.noOwner++
		}
		if r.tl != nil {
			row := r.dec.Rule
			if row < 0 {
				row = r.nRules + RowUnmatched
				if r.dec.Malformed {
					row = r.nRules + RowMalformed
				}
			}
			r.tl.add(now, row, v == shaper.Drop, r.dec.Exceeded, r.dec.SetMark)
		}
	} else {
		r.nonIP++
		if r.tl != nil {
			r.tl.add(now, r.nRules+RowNonIP, false, false, false)
		}
	}
	if r.verdicts != nil {
		if r.verdicts.Available() < 32 {
			// Room for the longest line, so that the append below never
			// grows (allocates) a new buffer.
			if err := r.verdicts.Flush(); err != nil {
				return fmt.Errorf("writing verdicts: %v", err)
			}
		}
		b := r.verdicts.AvailableBuffer()
		b = strconv.AppendUint(b, r.index, 10)
		switch {
		case v == shaper.Drop:
			b = append(b, " DROP\n"...)
		case depart != 0:
			b = append(b, " ACCEPT +"...)
			b = strconv.AppendInt(b, depart-now, 10)
			b = append(b, '\n')
		default:
			b = append(b, " ACCEPT\n"...)
		}
		if _, err := r.verdicts.Write(b); err != nil {
			return fmt.Errorf("writing verdicts: %v", err)
		}
	}
	if v == shaper.Drop {
		if r.drp.buf != nil {
			return r.drp.write(data, ci, lt)
		}
		return nil
	}
	if depart != 0 {
		r.hold(data, ci, lt, depart)
		return nil
	}
	if r.acc.buf == nil {
		return nil
	}
	return r.acc.write(data, ci, lt)
}

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
	rec := heldRec{depart: depart, seq: r.heldSeq, ci: c, lt: lt, size: len(data)}
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
		top.ci.Timestamp = time.Unix(0, top.depart).UTC()
		err := r.acc.write(top.data, &top.ci, top.lt)
		r.recycle(top.data)
		if err != nil {
			return err
		}
	}
	return nil
}

// Flush writes out what the outputs buffer. Call it once at the end (also
// after an error, so that the outputs hold the records before it).
func (r *Replayer) Flush() error {
	var errs []error
	if err := r.release(math.MaxInt64); err != nil {
		errs = append(errs, err)
	}
	if r.verdicts != nil {
		if err := r.verdicts.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("writing verdicts: %v", err))
		}
	}
	for _, o := range []*pcapOut{&r.acc, &r.drp} {
		if err := o.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Timeline returns the per-rule counts over capture time so far (see
// Options.Timeline), or nil. It is the Replayer's: read it, do not keep it
// while replaying goes on.
func (r *Replayer) Timeline() *Timeline { return r.tl }

// Summary returns the counts so far.
func (r *Replayer) Summary() Summary {
	st := r.eng.Stats()
	return Summary{
		Packets:       st.Packets + r.nonIP,
		Accepted:      st.Accepted + r.nonIP,
		Dropped:       st.Dropped,
		Delayed:       st.Delayed,
		ShapeOverflow: st.ShapeOverflow,
		Delays:        r.eng.Delays(),
		Malformed:     st.Malformed,
		Unmatched:     st.Unmatched,
		NoPorts:       st.NoPorts,
		NonIP:         r.nonIP,
		NoOwner:       r.noOwner,
		Flows:         st.Flows,
		FlowsSeen:     st.Flows + st.Evictions + st.Expired,
		Evictions:     st.Evictions,
		Expired:       st.Expired,
		First:         r.first,
		Last:          r.last,
	}
}

// RuleSummary is one rule's counts.
type RuleSummary struct {
	Name string
	shaper.RuleStats
}

// Rule returns the engine's rule i, as it runs it.
func (r *Replayer) Rule(i int) shaper.Rule { return r.eng.Rule(i) }

// Rules returns each rule's counts, in the policy's order.
func (r *Replayer) Rules() []RuleSummary {
	rs := make([]RuleSummary, r.eng.NumRules())
	for i := range rs {
		rs[i] = RuleSummary{Name: r.eng.Rule(i).Name, RuleStats: r.eng.RuleStats(i)}
	}
	return rs
}

// flowRec is a flow as the report sorts it: no name yet, so that sorting
// a million flows costs the struct's size each (unsafe.Sizeof: 72 bytes),
// not a formatted string each.
type flowRec struct {
	// dropped: packets dropped; over: packets over the limit that a
	// shadow or marking rule (kind) accepted.
	dropped, over, packets uint64
	rule                   int32
	kind                   overKind
	key                    flows.Key
}

// overKind is what a rule does with the packets over its limit.
type overKind uint8

const (
	overDrops  overKind = iota
	overShadow          // accepts them, counts them as shadow-dropped
	overMarks           // accepts them with a mark
)

// newFlowRec is the flowRec of a flow of rule (the shaper counts every
// packet over the limit as the flow's Dropped, whatever the rule does
// with it).
func (r *Replayer) newFlowRec(rule int, k flows.Key, s shaper.FlowStats) flowRec {
	if r.kinds == nil {
		r.kinds = make([]overKind, r.eng.NumRules())
		for i := range r.kinds {
			switch ru := r.eng.Rule(i); {
			case ru.Shadow:
				r.kinds[i] = overShadow
			case ru.MarkExceeded:
				r.kinds[i] = overMarks
			}
		}
	}
	f := flowRec{dropped: s.Dropped, packets: s.Packets, rule: int32(rule), kind: r.kinds[rule], key: k}
	if f.kind != overDrops {
		f.over, f.dropped = s.Dropped, 0
	}
	return f
}

// before is the report's order: most drops first, then most packets over
// the limit accepted (shadow drops, marks), then most packets, then by
// rule and key bytes: deterministic.
func (a *flowRec) before(b *flowRec) bool {
	if a.dropped != b.dropped {
		return a.dropped > b.dropped
	}
	if a.over != b.over {
		return a.over > b.over
	}
	if a.packets != b.packets {
		return a.packets > b.packets
	}
	if a.rule != b.rule {
		return a.rule < b.rule
	}
	return compareKeys(&a.key, &b.key) < 0
}

// compareKeys orders keys by their fields, a total order.
func compareKeys(a, b *flows.Key) int {
	if c := bytes.Compare(a.Src[:], b.Src[:]); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Dst[:], b.Dst[:]); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort),
		cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Family, b.Family), cmp.Compare(a.Mode, b.Mode),
		cmp.Compare(noOwner(a), noOwner(b)))
}

func noOwner(k *flows.Key) int {
	if k.NoOwner {
		return 1
	}
	return 0
}

func (r *Replayer) summary(f *flowRec) FlowSummary {
	fs := FlowSummary{Rule: int(f.rule), Key: f.key, Flow: r.eng.FlowName(int(f.rule), f.key), Packets: f.packets,
		Accepted: f.packets - f.dropped, Dropped: f.dropped}
	switch f.kind {
	case overShadow:
		fs.ShadowDropped = f.over
	case overMarks:
		fs.Marked = f.over
	}
	return fs
}

// Flows returns the max flows (max > 0) of the engine's tables that come
// first in the report's order: most drops first, then most packets, then by
// rule and key. It keeps only max of them while it looks, so a top-10 of a
// million flows takes no memory to speak of.
func (r *Replayer) Flows(max int) []FlowSummary {
	if max <= 0 {
		var fs []FlowSummary
		r.EachFlow(func(f FlowSummary) { fs = append(fs, f) })
		return fs
	}
	// A heap of the best max so far, worst on top.
	top := heap.New(func(a, b *flowRec) bool { return b.before(a) }, max)
	r.eng.Flows(func(rule int, k flows.Key, s shaper.FlowStats) bool {
		f := r.newFlowRec(rule, k, s)
		switch {
		case top.Len() < max:
			top.Push(f)
		case f.before(top.Top()):
			*top.Top() = f
			top.Fix(0)
		}
		return true
	})
	h := top.Items()
	sort.Slice(h, func(i, j int) bool { return h[i].before(&h[j]) })
	fs := make([]FlowSummary, len(h))
	for i := range h {
		fs[i] = r.summary(&h[i])
	}
	return fs
}

// EachFlow calls fn for every flow in the engine's tables, in the report's
// order (see Flows). It holds 72 bytes per flow (unsafe.Sizeof(flowRec{})) while it runs and names
// one flow at a time, for a report that streams them out.
func (r *Replayer) EachFlow(fn func(FlowSummary)) {
	all := make([]flowRec, 0, r.eng.Stats().Flows)
	r.eng.Flows(func(rule int, k flows.Key, s shaper.FlowStats) bool {
		all = append(all, r.newFlowRec(rule, k, s))
		return true
	})
	sort.Slice(all, func(i, j int) bool { return all[i].before(&all[j]) })
	for i := range all {
		fn(r.summary(&all[i]))
	}
}

// pcapOut writes records to a pcap file whose header (and so link type) is
// written with the first record, or to a pcapng file with one interface
// per link type, added as each first appears.
type pcapOut struct {
	name string
	buf  *bufio.Writer
	ng   bool
	// pcap
	w  *pcapgo.Writer
	lt layers.LinkType
	// pcapng
	ngw    *pcapgo.NgWriter
	ngLink []layers.LinkType // link type of each interface
	open   bool
}

func (o *pcapOut) init(w io.Writer, name string, ng bool) {
	o.buf = bufio.NewWriterSize(w, 256<<10)
	o.name = name
	o.ng = ng
	if !ng {
		o.w = pcapgo.NewWriterNanos(o.buf)
	}
}

// start writes the file header, naming lt as the first link type.
func (o *pcapOut) start(lt layers.LinkType) error {
	o.open = true
	if !o.ng {
		o.lt = lt
		return o.w.WriteFileHeader(MaxRecord, lt)
	}
	var err error
	o.ngw, err = pcapgo.NewNgWriterInterface(o.buf, ngInterface(lt), pcapgo.NgWriterOptions{
		SectionInfo: pcapgo.NgSectionInfo{Application: "packetshaper replay"},
	})
	o.ngLink = append(o.ngLink, lt)
	return err
}

func ngInterface(lt layers.LinkType) pcapgo.NgInterface {
	return pcapgo.NgInterface{Name: LinkTypeName(lt), LinkType: lt, SnapLength: MaxRecord, TimestampResolution: 9}
}

func (o *pcapOut) write(data []byte, ci *gopacket.CaptureInfo, lt layers.LinkType) error {
	if !o.open {
		if err := o.start(lt); err != nil {
			return fmt.Errorf("writing %s packets: %v", o.name, err)
		}
	}
	c := *ci
	c.CaptureLength = len(data)
	if c.Length < c.CaptureLength {
		c.Length = c.CaptureLength
	}
	if c.Timestamp.IsZero() {
		// pcapgo writes the wall clock for a zero time; keep it
		// deterministic.
		c.Timestamp = time.Unix(0, 0)
	}
	var err error
	if o.ng {
		c.InterfaceIndex = -1
		for i, l := range o.ngLink {
			if l == lt {
				c.InterfaceIndex = i
				break
			}
		}
		if c.InterfaceIndex < 0 {
			if c.InterfaceIndex, err = o.ngw.AddInterface(ngInterface(lt)); err != nil {
				return fmt.Errorf("writing %s packets: %v", o.name, err)
			}
			o.ngLink = append(o.ngLink, lt)
		}
		c.AncillaryData = nil
		err = o.ngw.WritePacket(c, data)
	} else {
		if lt != o.lt {
			return fmt.Errorf("writing %s packets: link type %s (%d) differs from the file's %s (%d); a pcap file holds one link type (write .pcapng instead)",
				o.name, LinkTypeName(lt), uint16(lt), LinkTypeName(o.lt), uint16(o.lt))
		}
		err = o.w.WritePacket(c, data)
	}
	if err != nil {
		return fmt.Errorf("writing %s packets: %v", o.name, err)
	}
	return nil
}

// flush writes the header of an empty output (link type of the first
// record never seen: Ethernet) and flushes the buffers.
func (o *pcapOut) flush() error {
	if o.buf == nil {
		return nil
	}
	if !o.open {
		if err := o.start(layers.LinkTypeEthernet); err != nil {
			return fmt.Errorf("writing %s packets: %v", o.name, err)
		}
	}
	if o.ngw != nil {
		if err := o.ngw.Flush(); err != nil {
			return fmt.Errorf("writing %s packets: %v", o.name, err)
		}
	}
	if err := o.buf.Flush(); err != nil {
		return fmt.Errorf("writing %s packets: %v", o.name, err)
	}
	return nil
}
