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
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strconv"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/countname"
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
	// Conntrack gives each IP packet a connection tracking state for
	// ct-state matches, from a tracker of the capture's conversations
	// (conntrack.go) of at most ConntrackMax entries (0: 65536), the
	// least recently seen evicted first. Without it every packet's state
	// is unknown.
	Conntrack    bool
	ConntrackMax int
	// OwnClocks gives each file replayed its own clock, its first record
	// just after the previous file's last (clock.go); without it, several
	// files are one clock, their timestamps as captured.
	OwnClocks bool
	// MaxBackward and MaxGap bound how far capture time may go back or
	// forward between two records without a warning through Warn; 0
	// means DefaultMaxBackward and DefaultMaxGap, negative never warns.
	MaxBackward, MaxGap time.Duration
	// Warn, if not nil, gets each warning (a time jump), one line, no
	// newline.
	Warn func(string)
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
	ifIDs []int64
	// ifSection is the pcapng section ifIDs holds (Reader.Section).
	ifSection uint64
	verdicts  *bufio.Writer
	acc, drp  pcapOut
	tl        *Timeline // nil without Options.Timeline
	nRules    int
	kinds     []overKind // of each rule, once the flows are listed
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
	// ct tracks connections (Options.Conntrack), nil without; pkt is
	// the packet it reads.
	ct      *tracker
	pkt     flows.Packet
	clk     clock
	file    string // the file being replayed
	fileRec uint64 // its records so far
}

// New returns a Replayer that asks eng for verdicts.
func New(eng *shaper.Engine, o Options) *Replayer {
	r := &Replayer{eng: eng, opts: o, held: heap.New((*heldRec).before, 0)}
	r.meta.Queue = o.Queue
	r.nRules = eng.NumRules()
	if o.Conntrack {
		r.ct = newTracker(cmpOr(o.ConntrackMax, 65536))
	}
	if o.Timeline {
		r.tl = NewTimeline(r.nRules+ExtraRows, TimelineMinWidth, TimelineMaxBuckets)
	}
	if o.Verdicts != nil {
		r.verdicts = bufio.NewWriterSize(o.Verdicts, 64<<10)
	}
	if o.Accepted != nil {
		r.acc.init(o.Accepted, countname.Accepted, o.AcceptedNg)
	}
	if o.Dropped != nil {
		r.drp.init(o.Dropped, countname.Dropped, o.DroppedNg)
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
		return fmt.Errorf("%s: %w", name, err)
	}
	r.ifIDs, r.ifSection = r.ifIDs[:0], 0
	r.clk.startFile, r.file = true, name
	var n uint64 // records of this file
	for {
		data, ci, lt, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.progress(name, rd, size, n)
			return fmt.Errorf("%s: packet %d: %w", name, n+1, err)
		}
		n++
		r.fileRec = n
		r.meta.InIf = r.ifaceID(rd, ci.InterfaceIndex)
		r.meta.OutIf = r.meta.InIf
		if err := r.packet(data, &ci, lt); err != nil {
			return fmt.Errorf("%s: packet %d: %w", name, n, err)
		}
		if n%ProgressEvery == 0 {
			r.progress(name, rd, size, n)
		}
	}
	r.progress(name, rd, size, n)
	return nil
}

// ifaceID returns the classifier's id for the file's interface i, looking
// its name up once per pcapng section (indices are a section's: issue 29,
// a second section's packets were decided by the first one's names).
func (r *Replayer) ifaceID(rd *Reader, i int) uint32 {
	if r.opts.IfaceID == nil || i < 0 {
		return 0
	}
	if s := rd.Section(); s != r.ifSection {
		r.ifIDs, r.ifSection = r.ifIDs[:0], s
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
	now := r.at(Nanos(ci), r.file, r.fileRec)
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
		if r.ct != nil {
			r.pkt.DecodeLen(ip, r.meta.Len)
			r.meta.CtState = r.ct.state(&r.pkt, ip, now)
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
				return fmt.Errorf("writing verdicts: %w", err)
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
			return fmt.Errorf("writing verdicts: %w", err)
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

// Flush writes out what the outputs buffer. Call it once at the end (also
// after an error, so that the outputs hold the records before it).
func (r *Replayer) Flush() error {
	var errs []error
	if err := r.release(math.MaxInt64); err != nil {
		errs = append(errs, err)
	}
	if r.verdicts != nil {
		if err := r.verdicts.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("writing verdicts: %w", err))
		}
	}
	for _, o := range []*pcapOut{&r.acc, &r.drp} {
		if err := o.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Conntrack returns the tracker's counts, or nil without
// Options.Conntrack.
func (r *Replayer) Conntrack() *CtStats {
	if r.ct == nil {
		return nil
	}
	s := r.ct.Stats()
	return &s
}

// Timeline returns the per-rule counts over capture time so far (see
// Options.Timeline), or nil. It is the Replayer's: read it, do not keep it
// while replaying goes on.
func (r *Replayer) Timeline() *Timeline { return r.tl }
