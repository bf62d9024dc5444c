package offload

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/flows"
)

const (
	// maxBatch is the most keys one netlink batch carries.
	maxBatch = 256
	// maxRecent bounds the grace during which a report of a flow just
	// offloaded is taken for packets queued before its element was added
	// (see Stats.Skipped); it is also at most half the Timeout.
	maxRecent = 250 * time.Millisecond
	// expirySlack: an element expired this lately by our clock may
	// still be in the kernel (see flush).
	expirySlack = 50 * time.Millisecond
	// logEvery is the least time between two log lines about refusals.
	logEvery = 10 * time.Second
)

// Offloader pushes flows into the kernel's offload sets. Add may be called
// from any goroutine; so may Stats and KernelDrops.
type Offloader struct {
	timeout, recent time.Duration
	table           *nftables.Table
	sets            [numSets]*nftables.Set
	logf            func(string, ...any)

	ch     chan flows.Key
	stop   chan struct{}
	done   chan error
	clear  chan chan error // Clear's requests to the background goroutine
	closed sync.Once
	shut   atomic.Bool
	err    error
	c      counters

	// connMu serializes the lasting netlink socket's users (the background
	// goroutine and KernelDrops): a reply must go to whoever asked.
	connMu sync.Mutex
	conn   *nftables.Conn

	// Owned by the background goroutine.
	live    map[flows.Key]entry
	perSet  [numSets]int // live entries per set
	seen    map[flows.Key]struct{}
	lastLog time.Time
	nLog    int
}

// entry is what the Offloader knows of an element it added.
type entry struct {
	added, expires time.Time
}

// Open checks, in the calling thread's network namespace, that the offload
// table and its sets exist with the right key types, and starts the
// background goroutine. Its netlink socket stays in that namespace whatever
// thread later uses it. Errors are one line naming the fix.
func Open(c Config) (*Offloader, error) {
	o := &Offloader{timeout: c.Timeout, logf: c.Logf}
	if o.timeout == 0 {
		o.timeout = DefaultTimeout
	}
	if o.timeout < time.Millisecond {
		return nil, fmt.Errorf("offload: timeout %v: want at least 1ms", c.Timeout)
	}
	o.recent = min(o.timeout/2, maxRecent)
	name := c.Table
	if name == "" {
		name = DefaultTable
	}
	buf := c.Buffer
	if buf == 0 {
		buf = DefaultBuffer
	}
	if buf < 0 {
		return nil, fmt.Errorf("offload: buffer %d: want 0 (default) or more", buf)
	}
	o.table = &nftables.Table{Name: name, Family: nftables.TableFamilyINet}

	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, openErr(err, "offload: netlink: %v", err)
	}
	for i := range o.sets {
		s, err := conn.GetSetByName(o.table, setNames[i])
		if err != nil {
			conn.CloseLasting()
			if errors.Is(err, unix.ENOENT) {
				return nil, &openError{kind: ErrNoSets, err: err, msg: fmt.Sprintf(
					"offload: no set %s in table inet %s: add the offload rules with scripts/rules.sh add ... --offload",
					setNames[i], name)}
			}
			return nil, openErr(err, "offload: set inet %s %s: %v", name, setNames[i], err)
		}
		if s.KeyType.Name != setTypes[i] || s.KeyType.Bytes != uint32(keyLens[i]) || !s.HasTimeout || s.Interval || s.IsMap || s.Constant {
			conn.CloseLasting()
			return nil, &openError{kind: ErrNoSets, msg: fmt.Sprintf(
				"offload: set inet %s %s is not { type %s; flags timeout; }: delete the table (scripts/rules.sh del --all) and add the offload rules with scripts/rules.sh add ... --offload",
				name, setNames[i], setTypes[i])}
		}
		o.sets[i] = s
	}
	o.conn = conn
	o.ch = make(chan flows.Key, buf)
	o.stop = make(chan struct{})
	o.clear = make(chan chan error)
	o.done = make(chan error, 1)
	o.live = map[flows.Key]entry{}
	o.seen = map[flows.Key]struct{}{}
	go o.run()
	return o, nil
}

// openError is Open's one-line error; errors.Is finds kind and the cause.
type openError struct {
	msg       string
	kind, err error
}

func (e *openError) Error() string   { return e.msg }
func (e *openError) Unwrap() []error { return []error{e.kind, e.err} }

func openErr(err error, format string, args ...any) error {
	if errors.Is(err, os.ErrPermission) {
		return &openError{err: err, msg: "offload: netlink: permission denied (needs root or CAP_NET_ADMIN)"}
	}
	return &openError{err: err, msg: fmt.Sprintf(format, args...)}
}

// Add queues k, the exact 5-tuple of a flow to drop in the kernel (what
// shaper.Engine.TakeOffloads reports). It never blocks and never allocates:
// when the buffer is full, or after Close, k is counted as Lost. A nil
// Offloader ignores it.
func (o *Offloader) Add(k flows.Key) {
	if o == nil {
		return
	}
	if o.shut.Load() {
		o.c.lost.Add(1)
		return
	}
	select {
	case o.ch <- k:
	default:
		o.c.lost.Add(1)
	}
}

// Stats returns the counters so far.
func (o *Offloader) Stats() Stats {
	if o == nil {
		return Stats{}
	}
	return o.c.stats()
}

// Timeout is how long an element drops its flow.
func (o *Offloader) Timeout() time.Duration { return o.timeout }

// Close stops the background goroutine (keys still buffered are not
// offloaded) and deletes every element it added that has not expired. It
// returns what prevented that, if anything; a table or set gone meanwhile
// is no error (nothing is left in it). Later calls return the same.
func (o *Offloader) Close() error {
	o.closed.Do(func() {
		o.shut.Store(true)
		close(o.stop)
		o.err = <-o.done
		o.connMu.Lock()
		o.conn.CloseLasting()
		o.connMu.Unlock()
	})
	return o.err
}

// Clear deletes every element it added that has not expired, and goes on
// (a reload whose rules no longer drop some of the offloaded flows: they come
// back to the shaper, which offloads them again if its new rules drop them
// in a row). It waits for the deletion; safe from any goroutine.
func (o *Offloader) Clear() error {
	if o == nil || o.shut.Load() {
		return nil
	}
	reply := make(chan error, 1)
	select {
	case o.clear <- reply:
		return <-reply
	case <-o.stop:
		return nil
	}
}

// KernelDrops sums the counters of the drop rules in the offload table's
// chains: packets and bytes dropped in the kernel since the rules were added,
// by every process using the table. It asks the kernel (a few netlink
// dumps): call it at the metrics interval, not per packet.
func (o *Offloader) KernelDrops() (packets, bytes uint64, err error) {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	if o.shut.Load() {
		return 0, 0, errors.New("offload: closed")
	}
	chains, err := o.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return 0, 0, fmt.Errorf("offload: listing chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != o.table.Name {
			continue
		}
		rules, err := o.conn.GetRules(o.table, ch)
		if err != nil {
			return 0, 0, fmt.Errorf("offload: rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			ours := false
			var cnt *expr.Counter
			for _, e := range r.Exprs {
				switch e := e.(type) {
				case *expr.Lookup:
					for _, n := range setNames {
						ours = ours || e.SetName == n
					}
				case *expr.Counter:
					cnt = e
				}
			}
			if ours && cnt != nil {
				packets += cnt.Packets
				bytes += cnt.Bytes
			}
		}
	}
	return packets, bytes, nil
}

func (o *Offloader) run() {
	tick := time.NewTicker(min(max(o.timeout/4, 50*time.Millisecond), time.Second))
	defer tick.Stop()
	batch := make([]flows.Key, 0, maxBatch)
	for {
		select {
		case <-o.stop:
			o.done <- o.cleanup()
			return
		case reply := <-o.clear:
			err := o.cleanup()
			for k := range o.live {
				delete(o.live, k)
			}
			o.perSet = [numSets]int{}
			o.c.active.Store(0)
			reply <- err
		case now := <-tick.C:
			o.expire(now)
		case k := <-o.ch:
			batch = append(batch[:0], k)
		fill:
			for len(batch) < maxBatch {
				select {
				case k := <-o.ch:
					batch = append(batch, k)
				default:
					break fill
				}
			}
			o.flush(batch, time.Now())
		}
	}
}

// expire forgets elements the kernel has removed: those past their expiry
// by more than a second, so that ours, taken before the kernel's, never
// makes Close skip an element still there. Active counts those not expired.
func (o *Offloader) expire(now time.Time) {
	active := 0
	for k, e := range o.live {
		switch {
		case now.Before(e.expires):
			active++
		case now.Sub(e.expires) > time.Second:
			delete(o.live, k)
			var b [maxKeyLen]byte
			set, _, _ := encodeKey(&k, &b)
			o.perSet[set]--
		}
	}
	o.c.active.Store(uint64(active))
}

// pending is one key of a batch on its way to the kernel.
type pending struct {
	k       flows.Key
	set     int
	refresh bool
}

// flush sends one batch: new elements, and for refreshed ones a delete and
// an add in the same transaction (an add alone does not restart the timeout
// of an element that exists).
func (o *Offloader) flush(keys []flows.Key, now time.Time) {
	var adds, dels [numSets][]nftables.SetElement
	var ps []pending
	clear(o.seen)
	var b [maxKeyLen]byte
	for i := range keys {
		k := &keys[i]
		set, n, ok := encodeKey(k, &b)
		if !ok {
			o.c.invalid.Add(1)
			continue
		}
		if _, dup := o.seen[*k]; dup {
			o.c.skipped.Add(1)
			continue
		}
		o.seen[*k] = struct{}{}
		// Live as far as we know, or expired so lately that the
		// kernel, whose timeout started after ours, may still hold it:
		// then a plain add would not restart its timeout.
		e, known := o.live[*k]
		refresh := known && now.Before(e.expires.Add(expirySlack))
		if refresh && now.Sub(e.added) < o.recent {
			o.c.skipped.Add(1)
			continue
		}
		if !known && o.sets[set].Size > 0 && o.perSet[set] >= int(o.sets[set].Size) {
			o.c.full.Add(1)
			continue
		}
		el := nftables.SetElement{Key: append([]byte(nil), b[:n]...), Timeout: o.timeout}
		if refresh {
			dels[set] = append(dels[set], nftables.SetElement{Key: el.Key})
		}
		adds[set] = append(adds[set], el)
		ps = append(ps, pending{k: *k, set: set, refresh: refresh})
	}
	if len(ps) == 0 {
		return
	}
	err := o.send(&adds, &dels)
	if err != nil && errors.Is(err, unix.ENOENT) && hasAny(&dels) {
		// An element to refresh is gone already (expired, or deleted
		// by hand), and the transaction with it: add them all afresh.
		err = o.send(&adds, nil)
	}
	if err != nil {
		o.c.errors.Add(uint64(len(ps)))
		o.logRefusal(now, len(ps), err)
		return
	}
	for _, p := range ps {
		if p.refresh {
			o.c.refreshed.Add(1)
		} else {
			o.c.offloaded.Add(1)
			o.c.active.Add(1) // expire counts exactly, at each tick
			if _, known := o.live[p.k]; !known {
				o.perSet[p.set]++
			}
		}
		o.live[p.k] = entry{added: now, expires: now.Add(o.timeout)}
	}
}

func hasAny(s *[numSets][]nftables.SetElement) bool {
	for _, e := range s {
		if len(e) > 0 {
			return true
		}
	}
	return false
}

// send deletes dels and adds adds in one transaction.
func (o *Offloader) send(adds, dels *[numSets][]nftables.SetElement) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	if dels != nil {
		for i, d := range dels {
			if len(d) > 0 {
				if err := o.conn.SetDeleteElements(o.sets[i], d); err != nil {
					return err
				}
			}
		}
	}
	for i, a := range adds {
		if len(a) > 0 {
			if err := o.conn.SetAddElements(o.sets[i], a); err != nil {
				return err
			}
		}
	}
	return o.conn.Flush()
}

func (o *Offloader) logRefusal(now time.Time, n int, err error) {
	o.nLog++
	if o.logf == nil || now.Sub(o.lastLog) < logEvery {
		return
	}
	hint := ""
	if errors.Is(err, unix.ENOENT) {
		hint = " (table inet " + o.table.Name + " or its sets gone? scripts/rules.sh add ... --offload)"
	} else if errors.Is(err, unix.ENFILE) {
		hint = " (a set is full)"
	}
	o.logf("offload: the kernel refused %d flows (%d refusals since the last report)%s: %v", n, o.nLog, hint, err)
	o.lastLog, o.nLog = now, 0
}

// cleanup deletes the live elements this Offloader added. It reads the sets
// first and deletes only elements still there, as a delete of an element
// that has just expired would fail the whole transaction; if one expires
// between the two steps, it tries again.
func (o *Offloader) cleanup() error {
	if len(o.live) == 0 {
		return nil
	}
	var ours [numSets]map[string]bool
	var b [maxKeyLen]byte
	for k := range o.live {
		set, n, _ := encodeKey(&k, &b)
		if ours[set] == nil {
			ours[set] = map[string]bool{}
		}
		ours[set][string(b[:n])] = true
	}
	o.connMu.Lock()
	defer o.connMu.Unlock()
	var err error
	for range 3 {
		n := 0
		for i, s := range o.sets {
			if ours[i] == nil {
				continue
			}
			elems, gerr := o.conn.GetSetElements(s)
			if gerr != nil {
				// GetSetElements keeps no errno; GetSetByName does.
				if _, serr := o.conn.GetSetByName(o.table, setNames[i]); errors.Is(serr, unix.ENOENT) {
					continue // the set is gone, and its elements
				}
				return fmt.Errorf("offload: reading set %s: %v", setNames[i], gerr)
			}
			var del []nftables.SetElement
			for _, e := range elems {
				if ours[i][string(e.Key)] && (e.Expires > 0 || e.Timeout == 0) {
					del = append(del, nftables.SetElement{Key: e.Key})
				}
			}
			if len(del) > 0 {
				if err := o.conn.SetDeleteElements(s, del); err != nil {
					return fmt.Errorf("offload: %w", err)
				}
				n += len(del)
			}
		}
		if n == 0 {
			return nil
		}
		if err = o.conn.Flush(); err == nil || !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("offload: deleting our elements: %w", err)
		if o.logf != nil {
			o.logf("%v", err)
		}
	}
	return err
}
