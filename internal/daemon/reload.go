package daemon

import (
	"fmt"
	"time"

	"github.com/packetshaper/packetshaper/policy"
)

// reloadTimeout bounds how long a reload waits for the policy to be read
// and compiled. A path that never answers (a hung file system) is then a
// failed reload, and the main loop goes on (stats, reloads, a stop). It is
// far above what reading and compiling the largest file policy accepts
// takes (policy.MaxFileSize, policy.MaxMatchBytes).
var reloadTimeout = 30 * time.Second

// loadResult is what one Source.Load returned.
type loadResult struct {
	comp *policy.Compiled
	err  error
}

// reloader runs Source.Load off the main loop: the loop waits for it for at
// most reloadTimeout, and not at all once the queues have stopped. A load
// that outlives its wait is abandoned (its goroutine ends when the read
// does, and its result is dropped); while it has not ended, no other load
// starts, so a hung path holds at most one goroutine.
type reloader struct {
	src     Source
	pending chan loadResult // the abandoned load, until it ends
}

// load reads and compiles the policy from r.src, waiting for at most
// reloadTimeout or until stop is closed (stopped true: the caller stops).
func (r *reloader) load(stop <-chan struct{}) (comp *policy.Compiled, stopped bool, err error) {
	if r.pending != nil {
		select {
		case <-r.pending: // ended since: its result is stale
			r.pending = nil
		default:
			return nil, false, fmt.Errorf("%s: the previous reload is still reading it (over %v): not started again", r.src.Describe(), reloadTimeout)
		}
	}
	done := make(chan loadResult, 1)
	go func() {
		c, err := r.src.Load()
		done <- loadResult{c, err}
	}()
	t := time.NewTimer(reloadTimeout)
	defer t.Stop()
	select {
	case res := <-done:
		return res.comp, false, res.err
	case <-t.C:
		r.pending = done
		return nil, false, fmt.Errorf("%s: reading and compiling the policy took over %v (a hung file system?): gave up", r.src.Describe(), reloadTimeout)
	case <-stop:
		r.pending = done
		return nil, true, nil
	}
}
