package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestNoSleepInDaemon: the daemon's non-test code (this package and those
// under it) never waits by sleeping: it waits on channels and timers.
func TestNoSleepInDaemon(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		n++
		ast.Inspect(f, func(x ast.Node) bool {
			if s, ok := x.(*ast.SelectorExpr); ok && s.Sel.Name == "Sleep" {
				if id, ok := s.X.(*ast.Ident); ok && id.Name == "time" {
					t.Errorf("%s: time.Sleep in the daemon's code", fset.Position(s.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

// TestReloadWaitsForSwap: a reload lets the previous policy's global rules
// go (waitSwapped's done) only once a queue has swapped its engine in (or
// a later one), told by the generation's channel, not by polling; a reload
// superseded before any swap is released by the swap of the one after it;
// queues that stopped release it too.
func TestReloadWaitsForSwap(t *testing.T) {
	pol := compilePolicy(t, mqPolicy)
	ws, _ := newMQWorkers(t, mqPolicy)
	sh := ws[0].shared
	reload := func() <-chan struct{} {
		t.Helper()
		_, ch, err := sh.install(func(base *shaper.Engine) (*shaper.Engine, []string, error) { return base.Reload(pol) })
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	first := reload()
	second := reload() // before any queue swapped the first in
	done := make(chan struct{})
	go waitSwapped(sh, first, time.Hour, func() { close(done) })
	if closed(first) || closed(second) || closed(done) {
		t.Fatal("released before any swap")
	}
	b := srcPackets(0, 1)
	ws[1].decide(b, make([]nfq.Verdict, len(b)), int64(1e18))
	if !closed(first) || !closed(second) {
		t.Fatalf("after the swap: first closed %v, second closed %v, want both", closed(first), closed(second))
	}
	<-done // waitSwapped returns on the channel (the test's deadline bounds it)
	if ws[0].pending.Load() != nil || ws[0].cur.Load() != ws[1].eng {
		t.Fatal("the second reload's engine is not the one in force")
	}

	// A reload no queue swaps in: released when the queues stop.
	third := reload()
	done2 := make(chan struct{})
	go waitSwapped(sh, third, time.Hour, func() { close(done2) })
	if closed(done2) {
		t.Fatal("released before the queues stopped")
	}
	for _, w := range ws {
		w.stop(int64(1e18))
	}
	<-done2
}
