package nfq

import (
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// A testOption changes a Queue opened by openQueue before Run: the test
// hooks, set only here, through the Queue's defaults (writer, wallNs,
// spinShare), so that the production path checks no hook.
type testOption func(*Queue)

// withWriteHook calls hook with every message before it is written; an
// error it returns fails the write.
func withWriteHook(hook func(b []byte) error) testOption {
	return func(q *Queue) {
		next := q.writer
		q.writer = func(b []byte) error {
			if err := hook(b); err != nil {
				return err
			}
			return next(b)
		}
	}
}

// withTimedWrites adds the time spent in message writes to ns.
func withTimedWrites(ns *atomic.Int64) testOption {
	return func(q *Queue) {
		next := q.writer
		q.writer = func(b []byte) error {
			t0 := time.Now()
			err := next(b)
			ns.Add(int64(time.Since(t0)))
			return err
		}
	}
}

// withWallClock replaces the wall clock read at Run's start (ns since the
// Unix epoch), which sets the engine's clock.
func withWallClock(wall func() int64) testOption {
	return func(q *Queue) { q.wallNs = func(time.Time) int64 { return wall() } }
}

// TestQueueHasNoTestKnobs: the test hooks that Queue's production path
// used to check (issue 18) are gone from it; tests set them through the
// options above.
func TestQueueHasNoTestKnobs(t *testing.T) {
	typ := reflect.TypeOf(Queue{})
	for _, name := range []string{"timeWrites", "writeNs", "writeHook", "wallClock"} {
		if _, ok := typ.FieldByName(name); ok {
			t.Errorf("Queue has the test hook %s: set it through a testOption", name)
		}
	}
}
