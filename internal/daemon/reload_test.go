package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/policy"
)

// blockingSource is a Source whose Load waits until release is closed.
type blockingSource struct{ release chan struct{} }

func (s blockingSource) Load() (*policy.Compiled, error) {
	<-s.release
	f, err := policy.Parse("p.toml", []byte("[[rule]]\nname = \"a\"\npps = 1\n"))
	if err != nil {
		return nil, err
	}
	return f.Compile(policy.Options{})
}
func (blockingSource) Reloadable() bool { return true }
func (blockingSource) Describe() string { return "p.toml" }

// TestReloaderNeverBlocks: a load that hangs is a failed reload after
// reloadTimeout; while it hangs no other starts; a stop ends the wait at
// once; once it has ended, reloads work again.
func TestReloaderNeverBlocks(t *testing.T) {
	old := reloadTimeout
	reloadTimeout = 50 * time.Millisecond
	t.Cleanup(func() { reloadTimeout = old })
	src := blockingSource{release: make(chan struct{})}
	r := &reloader{src: src}
	never := make(chan struct{})

	comp, stopped, err := r.load(never)
	if comp != nil || stopped || err == nil || err.Error() != "p.toml: reading and compiling the policy took over 50ms (a hung file system?): gave up" {
		t.Fatalf("hung load: %v %v %v", comp, stopped, err)
	}
	_, stopped, err = r.load(never)
	if stopped || err == nil || err.Error() != "p.toml: the previous reload is still reading it (over 50ms): not started again" {
		t.Fatalf("load while one hangs: %v %v", stopped, err)
	}
	close(src.release)
	// The abandoned load ends; the next one reads afresh.
	deadline := time.Now().Add(10 * time.Second)
	for {
		comp, stopped, err = r.load(never)
		if err == nil || !strings.Contains(err.Error(), "still reading") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if comp == nil || stopped || err != nil {
		t.Fatalf("load after the hang ended: %v %v %v", comp, stopped, err)
	}

	// A stop while a load hangs: the wait ends at once.
	reloadTimeout = time.Hour
	src = blockingSource{release: make(chan struct{})}
	defer close(src.release)
	r = &reloader{src: src}
	stop := make(chan struct{})
	close(stop)
	if comp, stopped, err := r.load(stop); comp != nil || !stopped || err != nil {
		t.Fatalf("stopped load: %v %v %v", comp, stopped, err)
	}
}
