package replay

import (
	"fmt"
	"time"
)

// Capture time across records and files.
//
// Within a file, the records' timestamps are the clock. Across files, with
// Options.OwnClocks (packetshaper replay's default) each file keeps its own
// clock: its records' times are shifted so that its first record comes
// just after the previous file's last (ClockStep later), whatever the
// file's own timestamps say (two unrelated captures, or one file given
// twice, replay as one after the other). Without it (the zero Options, and
// replay --concatenate) the files' timestamps are one clock, as captured
// (the parts of one capture split by a ring buffer): then, as within a
// file, a jump back or forward by more than the Options' bounds is warned.

// Defaults of Options.MaxBackward and Options.MaxGap.
const (
	// DefaultMaxBackward: capture time going back by more than this is
	// warned (a reordering of a few records is normal; the limiters
	// never grant tokens for time going back).
	DefaultMaxBackward = time.Second
	// DefaultMaxGap: capture time going forward by more than this
	// between two records is warned (every limiter is full again after
	// such a silence).
	DefaultMaxGap = time.Hour
	// ClockStep separates the last record of a file from the first of
	// the next one when each file keeps its own clock.
	ClockStep = time.Microsecond
	// maxJumpWarnings is how many jumps are warned one by one; the
	// others are counted (Replayer.TimeJumps).
	maxJumpWarnings = 5
)

// clock is the Replayer's time across files.
type clock struct {
	shift     int64 // added to the current file's timestamps
	startFile bool  // the next record is its file's first
	prev      int64 // the last record's time (shifted), if any
	max       int64 // the latest time so far
	hasPrev   bool
	jumps     uint64
}

// at returns the time of a record stamped ts (ns, 0: none) of file name,
// record n of it, and warns through warn of a jump.
func (r *Replayer) at(ts int64, name string, n uint64) int64 {
	c := &r.clk
	if ts == 0 && !c.hasPrev {
		return 0
	}
	if ts == 0 {
		return c.prev // no timestamp (a pcapng simple packet block): no time passes
	}
	// A jump is from one record to the next: after a jump back, the
	// records that follow it in order are not jumps.
	if c.startFile {
		c.startFile = false
		if c.hasPrev && r.opts.OwnClocks {
			c.shift = c.max + int64(ClockStep) - ts
		}
	}
	now := ts + c.shift
	if c.hasPrev {
		back, gap := r.opts.MaxBackward, r.opts.MaxGap
		if back == 0 {
			back = DefaultMaxBackward
		}
		if gap == 0 {
			gap = DefaultMaxGap
		}
		switch d := now - c.prev; {
		case back > 0 && d < -int64(back):
			r.jump(name, n, d, back)
		case gap > 0 && d > int64(gap):
			r.jump(name, n, d, gap)
		}
	}
	if !c.hasPrev || now > c.max {
		c.max = now
	}
	c.prev, c.hasPrev = now, true
	return now
}

// jump counts a jump of d ns (negative: back) beyond bound and warns of
// it (the first maxJumpWarnings: the message is made only then, so that
// replaying a capture that jumps often allocates nothing).
func (r *Replayer) jump(name string, n uint64, d int64, bound time.Duration) {
	r.clk.jumps++
	if r.opts.Warn == nil || r.clk.jumps > maxJumpWarnings {
		return
	}
	what := fmt.Sprintf("capture time jumps forward %v (more than --max-gap %v): every limiter is full again after it (unrelated captures?)", time.Duration(d), bound)
	if d < 0 {
		what = fmt.Sprintf("capture time goes back %v (more than --max-backward %v): the limiters grant nothing for it (the same file twice, or files out of order?)", time.Duration(-d), bound)
	}
	if r.clk.jumps == maxJumpWarnings {
		what += " (further jumps are counted, not shown)"
	}
	r.opts.Warn(fmt.Sprintf("%s: packet %d: %s", name, n, what))
}

// TimeJumps is how many times capture time went back or forward by more
// than the Options' bounds.
func (r *Replayer) TimeJumps() uint64 { return r.clk.jumps }
