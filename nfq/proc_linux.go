package nfq

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// procPath is the kernel's table of bound queues. /proc/net is per network
// namespace; thread-self resolves to the namespace of the calling thread
// (self would be the main thread's, wrong for a test that unshared one
// thread).
const procPath = "/proc/thread-self/net/netfilter/nfnetlink_queue"

// QueueTable is the kernel's table of bound queues (procPath), opened
// once, in the namespace of the thread that opened it: the kernel binds an
// open /proc/net file to that namespace, so it can be read again (from
// offset 0) from any thread. Safe for concurrent use. Queue reads it for
// KernelStats; package failopen samples it.
type QueueTable struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
}

// OpenQueueTable opens the kernel's table of bound queues in the calling
// thread's network namespace. The error is one line, starting with "nfq:",
// and wraps the open's error (fs.ErrNotExist without nfnetlink_queue).
func OpenQueueTable() (*QueueTable, error) {
	f, err := os.Open(procPath)
	if err != nil {
		return nil, fmt.Errorf("nfq: %w", err)
	}
	return &QueueTable{f: f, buf: make([]byte, 4096)}, nil
}

// Scan reads the whole table and calls fn for each queue in it, with the
// file locked (fn must not call Scan). It allocates only when the table
// outgrows its buffer.
func (p *QueueTable) Scan(fn func(queue uint16, ks KernelStats)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return errors.New("nfq: /proc file closed")
	}
	for {
		n, err := p.f.ReadAt(p.buf, 0)
		if err != nil && err != io.EOF {
			return fmt.Errorf("nfq: read %s: %w", procPath, err)
		}
		if n == len(p.buf) && err == nil {
			// Maybe more: read it all again into a bigger buffer
			// (a seq_file read at offset 0 starts over).
			p.buf = make([]byte, 2*len(p.buf))
			continue
		}
		eachProcLine(p.buf[:n], fn)
		return nil
	}
}

// stats returns the counters of one queue, or ErrNotBound.
func (p *QueueTable) stats(queue uint16) (KernelStats, error) {
	var out KernelStats
	found := false
	err := p.Scan(func(q uint16, ks KernelStats) {
		if q == queue {
			out, found = ks, true
		}
	})
	if err != nil {
		return KernelStats{}, err
	}
	if !found {
		return KernelStats{}, ErrNotBound
	}
	return out, nil
}

// Close closes the table; Scan then fails. It is safe to call more than
// once.
func (p *QueueTable) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	return err
}

// BoundQueues lists the queues bound by any process in the calling
// thread's network namespace (none if nfnetlink_queue is not loaded).
func BoundQueues() ([]uint16, error) {
	p, err := OpenQueueTable()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var qs []uint16
	err = p.Scan(func(q uint16, _ KernelStats) { qs = append(qs, q) })
	return qs, err
}
