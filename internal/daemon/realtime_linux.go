package daemon

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/packetshaper/packetshaper/nfq"
	"golang.org/x/sys/unix"
)

// setProcessRealtime puts every thread of the process under SCHED_FIFO at
// priority prio (Config.RealtimePriority); threads the runtime starts
// later inherit it from the thread that creates them. Run calls it once,
// before it opens the queues. The error is one line and wraps
// nfq.ErrPermission when the kernel refuses.
//
// The whole process, not the reader's thread: a queue's Run is not locked
// to a thread (it waits in the runtime's netpoller, and any thread of the
// runtime runs it after a wake-up), so a per-thread setting would not
// follow it. And a Go thread does not run alone. Right after a read
// returns, the reader may have to wait for another thread of the runtime
// (a GC worker scanning its stack, the thread holding its P), and the
// runtime waits for it by spinning with sched_yield. A real-time thread that yields gives its CPU only to threads
// of its own priority, so with the reader alone at SCHED_FIFO and the other
// thread on the same CPU, the reader would spin until the kernel's
// real-time throttling stopped it (docs/design.md, "Levers tried": the
// reader-only setting and why it was rejected). With every thread at the
// same priority, a yield lets the other one run.
func setProcessRealtime(prio int) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("real-time priority %d: %w: SCHED_FIFO needs root or CAP_SYS_NICE (or RLIMIT_RTPRIO >= %d)", prio, nfq.ErrPermission, prio)
		}
		return fmt.Errorf("real-time priority %d: sched_setattr(SCHED_FIFO): %w", prio, err)
	}
	// Threads started while the list is read are found by the next pass;
	// a thread being cloned from one not yet set may copy the old policy
	// before it shows in the list, so the walk ends only after two passes
	// in a row found no thread it had not set.
	done := map[int]bool{}
	quiet := 0
	for pass := 0; pass < 50 && quiet < 2; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("real-time priority %d: %w", prio, err)
		}
		changed := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			done[tid], changed = true, true
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("real-time priority %d: thread %d: sched_setattr(SCHED_FIFO): %w", prio, tid, err)
			}
		}
		if changed {
			quiet = 0
		} else {
			quiet++
		}
	}
	return nil
}
