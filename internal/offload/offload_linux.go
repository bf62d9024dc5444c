package offload

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
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

	ch     chan item
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
	ec     *elemConn // adds and dumps elements with their expressions

	// Owned by the background goroutine.
	live    map[flows.Key]entry
	perSet  [numSets]int // live entries per set
	seen    map[flows.Key]struct{}
	lastLog time.Time
	nLog    int
}

// item is what Add queues: a flow and its rule's limit.
type item struct {
	k flows.Key
	l shaper.OffloadLimit
}

// entry is what the Offloader knows of an element it added.
type entry struct {
	added, expires time.Time
	lim            expr.Limit
	drops          uint64 // the element's counter when last read
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
	if o.timeout < time.Millisecond || o.timeout > MaxTimeout {
		return nil, fmt.Errorf("offload: timeout %v: want 1ms to %v", c.Timeout, MaxTimeout)
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
		if s.KeyType.Name != setTypes[i] || s.KeyType.Bytes != uint32(keyLens[i]) || !s.HasTimeout || !s.Dynamic || s.Interval || s.IsMap || s.Constant {
			conn.CloseLasting()
			return nil, &openError{kind: ErrNoSets, msg: fmt.Sprintf(
				"offload: set inet %s %s is not { type %s; flags dynamic,timeout; }: delete the table (scripts/rules.sh del --all) and add the offload rules with scripts/rules.sh add ... --offload",
				name, setNames[i], setTypes[i])}
		}
		o.sets[i] = s
	}
	// What an earlier packetshaper left (killed before its Close) goes
	// now, not when it expires.
	for _, s := range o.sets {
		conn.FlushSet(s)
	}
	if err := conn.Flush(); err != nil {
		conn.CloseLasting()
		return nil, openErr(err, "offload: flushing the sets of table inet %s: %v", name, err)
	}
	ec, err := dialElems()
	if err != nil {
		conn.CloseLasting()
		return nil, openErr(err, "offload: netlink: %v", err)
	}
	o.ec = ec
	o.conn = conn
	o.ch = make(chan item, buf)
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

// Add queues k, the exact 5-tuple of a flow to hold to l in the kernel
// (what shaper.Engine.TakeOffloads reports). It never blocks and never
// allocates: when the buffer is full, or after Close, k is counted as Lost.
// A nil Offloader ignores it.
func (o *Offloader) Add(k flows.Key, l shaper.OffloadLimit) {
	if o == nil {
		return
	}
	if o.shut.Load() {
		o.c.lost.Add(1)
		return
	}
	select {
	case o.ch <- item{k, l}:
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
		o.ec.close()
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
	batch := make([]item, 0, maxBatch)
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
			o.refreshDropping(now)
		case it := <-o.ch:
			batch = append(batch[:0], it)
		fill:
			for len(batch) < maxBatch {
				select {
				case it := <-o.ch:
					batch = append(batch, it)
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
	lim     expr.Limit
	refresh bool
}

// kernelLimit is l as the kernel's limit statement ("limit rate over R/unit
// burst B packets|bytes"), never stricter: the rate rounded up in the
// smallest unit that keeps it within 0.1 % (or the week), the burst rounded
// up. ok is false for a limit that is no limit (0, negative, NaN, infinite).
func kernelLimit(l shaper.OffloadLimit) (k expr.Limit, ok bool) {
	if !(l.Rate > 0) || !(l.Burst > 0) || math.IsInf(l.Rate, 0) || math.IsInf(l.Burst, 0) {
		return k, false
	}
	k = expr.Limit{Type: expr.LimitTypePkts, Over: true, Unit: expr.LimitTimeWeek}
	if l.Bytes {
		k.Type = expr.LimitTypePktBytes
	}
	for _, u := range []expr.LimitTime{expr.LimitTimeSecond, expr.LimitTimeMinute, expr.LimitTimeHour, expr.LimitTimeDay, expr.LimitTimeWeek} {
		r := l.Rate * float64(u)
		if math.Ceil(r) <= r*1.001 || u == expr.LimitTimeWeek {
			k.Unit = u
			k.Rate = uint64(min(math.Ceil(r), math.MaxUint32))
			break
		}
	}
	k.Burst = uint32(min(math.Ceil(l.Burst), math.MaxUint32))
	return k, true
}

// flush sends one batch: new elements, and again those to refresh (an add
// of an element that exists restarts its timeout and keeps its limit's
// state and counter).
func (o *Offloader) flush(items []item, now time.Time) {
	var adds [numSets][]kelem
	var ps []pending
	clear(o.seen)
	var b [maxKeyLen]byte
	for i := range items {
		k := &items[i].k
		set, n, ok := encodeKey(k, &b)
		lim, lok := kernelLimit(items[i].l)
		if !ok || !lok {
			o.c.invalid.Add(1)
			continue
		}
		if _, dup := o.seen[*k]; dup {
			o.c.skipped.Add(1)
			continue
		}
		o.seen[*k] = struct{}{}
		// Live as far as we know, or expired so lately that the kernel,
		// whose timeout started after ours, may still hold it.
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
		adds[set] = append(adds[set], kelem{key: append([]byte(nil), b[:n]...), timeout: o.timeout, lim: lim})
		ps = append(ps, pending{k: *k, set: set, lim: lim, refresh: refresh})
	}
	if !o.commit(&adds, len(ps), now) {
		return
	}
	for _, p := range ps {
		e, known := o.live[p.k]
		if p.refresh {
			o.c.refreshed.Add(1)
		} else {
			o.c.offloaded.Add(1)
			o.c.active.Add(1) // expire counts exactly, at each tick
			if !known {
				o.perSet[p.set]++
			}
			e.drops = 0 // a new element: its counter starts at 0
		}
		e.added, e.expires, e.lim = now, now.Add(o.timeout), p.lim
		o.live[p.k] = e
	}
}

// send adds adds in one transaction.
func (o *Offloader) send(adds *[numSets][]kelem) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	return o.ec.add(o.table.Name, setNames[:], adds[:])
}

// refreshDropping restarts the timeout of the live elements whose limit
// dropped packets since the last look: an offloaded flow stays held to its
// limit while it floods and packetshaper runs, and its element expires
// within Timeout of its last drop, or of packetshaper's end.
func (o *Offloader) refreshDropping(now time.Time) {
	if len(o.live) == 0 {
		return
	}
	o.connMu.Lock()
	var dumps [numSets]map[string]kstate
	var err error
	for i := range o.sets {
		if o.perSet[i] == 0 {
			continue
		}
		var ks []kstate
		if ks, err = o.ec.dump(o.table.Name, setNames[i]); err != nil {
			break
		}
		dumps[i] = make(map[string]kstate, len(ks))
		for _, k := range ks {
			dumps[i][string(k.key)] = k
		}
	}
	o.connMu.Unlock()
	if err != nil {
		o.logRefusal(now, 0, err)
		return
	}
	var adds [numSets][]kelem
	var ks []flows.Key
	var b [maxKeyLen]byte
	for k, e := range o.live {
		if !now.Before(e.expires) {
			continue // gone, or going: a drop brings it back by the shaper
		}
		set, n, _ := encodeKey(&k, &b)
		st, ok := dumps[set][string(b[:n])]
		if !ok || st.drops <= e.drops {
			if ok {
				e.drops = st.drops
				o.live[k] = e
			}
			continue
		}
		e.drops = st.drops
		o.live[k] = e
		adds[set] = append(adds[set], kelem{key: append([]byte(nil), b[:n]...), timeout: o.timeout, lim: e.lim})
		ks = append(ks, k)
	}
	if !o.commit(&adds, len(ks), now) {
		return
	}
	for _, k := range ks {
		e := o.live[k]
		e.added, e.expires = now, now.Add(o.timeout)
		o.live[k] = e
		o.c.refreshed.Add(1)
	}
}

// commit sends adds, the n elements gathered (none: nothing to send); a
// refusal counts n errors and is logged. It reports whether the kernel
// took them.
func (o *Offloader) commit(adds *[numSets][]kelem, n int, now time.Time) bool {
	if n == 0 {
		return false
	}
	if err := o.send(adds); err != nil {
		o.c.errors.Add(uint64(n))
		o.logRefusal(now, n, err)
		return false
	}
	return true
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
	what := fmt.Sprintf("the kernel refused %d flows", n)
	if n == 0 {
		what = "could not read the sets to refresh the flows still dropping"
	}
	o.logf("offload: %s (%d refusals since the last report)%s: %v", what, o.nLog, hint, err)
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
			elems, gerr := o.ec.dump(o.table.Name, setNames[i])
			if gerr != nil {
				if errors.Is(gerr, unix.ENOENT) {
					continue // the set is gone, and its elements
				}
				return fmt.Errorf("offload: reading set %s: %w", setNames[i], gerr)
			}
			var del []nftables.SetElement
			for _, e := range elems {
				if ours[i][string(e.key)] && e.expires > 0 {
					del = append(del, nftables.SetElement{Key: e.key})
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
