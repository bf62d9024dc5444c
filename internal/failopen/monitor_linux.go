package failopen

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"golang.org/x/sys/unix"
)

// Monitor counts, for a set of queues, the packets the kernel passed
// without a verdict because the queue was full (fail-open), and logs when
// that starts and ends. See FailOpenStats for what is counted and how.
//
//	m, err := failopen.NewMonitor(queues, failopen.MonitorConfig{Logger: log})
//	if err != nil { ... }
//	defer m.Close()              // after the queues' Run returned
//	go m.Run(ctx)
//	... q.Run(ctx, handler) for each queue ...
//	s := m.Total()               // or m.Stats(queue), from any goroutine
//
// The Monitor samples the kernel's queue table every Period and reads the
// rule counters every RulePeriod, from Run's goroutine, through a file and
// a netlink socket opened by NewMonitor in the calling thread's network
// namespace. It takes its last reading when the first of its queues starts
// to stop (from that queue's Run, before it stops taking packets, or from
// Close): the queues stop together in practice, and from then on packets
// pass the closing queues by design. After that Stats no longer change and
// Run returns. Stats and Total are safe to call from any goroutine.
type Monitor struct {
	mu    sync.Mutex
	c     *core
	start time.Time
	proc  *nfq.QueueTable
	rr    *ruleReader // nil: counters not read (EstimateOnly, or no nf_tables)
	rErr  error       // why rr is nil, unless EstimateOnly
	nsfd  int
	reads int // rule readings so far
	done  chan struct{}
}

// NewMonitor starts accounting fail-open for qs, which must be open and not
// yet stopped, in the calling thread's network namespace. It takes a first
// reading (the baseline, and the log lines saying how each queue is
// counted). It fails only if the kernel's queue table cannot be read; the
// error is one line.
func NewMonitor(qs []*nfq.Queue, c MonitorConfig) (*Monitor, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if len(qs) == 0 {
		return nil, errors.New("nfq: monitor: no queues")
	}
	infos := make([]queueInfo, len(qs))
	for i, q := range qs {
		qc := q.Config()
		if !q.Bound() {
			return nil, fmt.Errorf("nfq: monitor: queue %d is not bound", qc.Queue)
		}
		infos[i] = queueInfo{num: qc.Queue, portID: q.PortID(), maxLen: qc.MaxQueueLen, failClosed: qc.FailClosed}
	}
	proc, err := nfq.OpenQueueTable()
	if err != nil {
		return nil, fmt.Errorf("nfq: monitor: %w", errors.Unwrap(err))
	}
	m := &Monitor{c: newCore(infos, c), start: time.Now(), proc: proc, nsfd: -1, done: make(chan struct{})}
	if !c.EstimateOnly {
		if fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			m.nsfd = fd
		}
		m.rr, m.rErr = newRuleReader(m.nsfd)
	}
	m.mu.Lock()
	m.settle(true)
	m.mu.Unlock()
	for _, q := range qs {
		if !q.OnStop(m.finish) {
			m.Close()
			return nil, fmt.Errorf("nfq: monitor: queue %d has stopped", q.Config().Queue)
		}
	}
	return m, nil
}

// now is the monitor's monotonic clock, in ns.
func (m *Monitor) now() int64 { return int64(time.Since(m.start)) }

// Run samples until ctx is cancelled or the Monitor has taken its last
// reading. The caller starts it in its own goroutine.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(time.Duration(m.c.period))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.done:
			return nil
		case <-t.C:
		}
		m.mu.Lock()
		if !m.c.finished {
			if m.c.dueSettle(m.now()) {
				m.settle(false)
			} else {
				m.sample(m.now())
			}
		}
		m.mu.Unlock()
	}
}

// sample reads the queue table into the core. m.mu is held.
func (m *Monitor) sample(now int64) {
	lines := map[uint16]nfq.KernelStats{}
	if err := m.proc.Scan(func(q uint16, ks nfq.KernelStats) {
		if m.c.queue(q) != nil {
			lines[q] = ks
		}
	}); err != nil {
		return // closed: nothing to sample
	}
	m.c.sample(now, func(q uint16) (nfq.KernelStats, bool) {
		ks, ok := lines[q]
		return ks, ok
	})
}

// settle reads the rule counters, then samples the queue table, and
// settles the interval. m.mu is held.
func (m *Monitor) settle(full bool) {
	var rules []QueueRule
	err := m.rErr
	if m.rr != nil {
		full = full || m.reads%fullScanEvery == 0
		m.reads++
		rules, err = m.rr.read(full)
	} else if err == nil && !m.c.estimateOnly {
		err = errors.New("nfq: no nf_tables socket")
	}
	now := m.now()
	m.sample(now)
	m.c.settle(now, rules, err)
}

// finish takes the last reading, once: the stop hook of every queue.
func (m *Monitor) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.finished {
		return
	}
	m.settle(false)
	m.c.finish(m.now())
	close(m.done)
}

// Stats returns the fail-open counts of one queue (the zero value for a
// queue the Monitor does not watch).
func (m *Monitor) Stats(queue uint16) FailOpenStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.c.queue(queue); q != nil {
		return q.stats()
	}
	return FailOpenStats{}
}

// Total returns the counts summed over the Monitor's queues: Secs is the
// time at least one of them was full, Exact that every one is exact,
// Active that one is full now.
func (m *Monitor) Total() FailOpenStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c.total()
}

// Close releases the Monitor's file and socket. Call it after the queues'
// Run returned (or were closed): a queue stopping later gets no last
// reading. It is safe to call more than once.
func (m *Monitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.Close()
	}
	if m.rr != nil {
		m.rr.close()
		m.rr = nil
	}
	if m.nsfd >= 0 {
		unix.Close(m.nsfd)
		m.nsfd = -1
	}
	return nil
}
