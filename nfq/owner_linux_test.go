package nfq

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/packetshaper/packetshaper/internal/netnstest"
)

// ownerRun sends n datagrams through queue and returns the packets'
// owners as the handler saw them.
func ownerRun(t *testing.T, queue uint16, c Config) (q *Queue, owners map[string]int) {
	t.Helper()
	netnstest.UnshareQueue(t, queue)
	p := netnstest.NewUDPPair(t)
	c.Queue = queue
	q = openQueue(t, c)
	var mu sync.Mutex
	owners = map[string]int{}
	stop := runQueue(t, q, func(batch []Packet, v []Verdict, now int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, pk := range batch {
			owners[fmt.Sprintf("has=%v uid=%d gid=%d", pk.HasOwner, pk.UID, pk.GID)]++
		}
	})
	const n = 50
	sendAll(t, p, n, 8)
	stop()
	mu.Lock()
	defer mu.Unlock()
	return q, owners
}

// TestOwnersLive: the kernel sends the owner of a local socket's packets
// (this test's own uid and gid) once the queue asks for it.
func TestOwnersLive(t *testing.T) {
	q, owners := ownerRun(t, 11, Config{})
	if !q.Owners() {
		t.Error("Owners() = false on a kernel that sends owners")
	}
	want := fmt.Sprintf("has=true uid=%d gid=%d", os.Getuid(), os.Getgid())
	if owners[want] != 50 || len(owners) != 1 {
		t.Errorf("owners seen: %v, want 50 × %q", owners, want)
	}
}

// TestOwnersRefused: a kernel that refuses the owners' flag (here a flag
// past NFQA_CFG_F_MAX, which every kernel refuses as it would refuse
// NFQA_CFG_F_UID_GID before 3.19) still gets a bound, fail-open queue,
// without owners, and Logf says so once.
func TestOwnersRefused(t *testing.T) {
	setFlag(t, &ownersFlag, 1<<5) // NFQA_CFG_F_MAX on kernels up to 6.x at least
	logf, logged := logLines()
	q, owners := ownerRun(t, 12, Config{Logf: logf})
	if q.Owners() {
		t.Error("Owners() = true after the kernel refused the flag")
	}
	if owners["has=false uid=0 gid=0"] != 50 || len(owners) != 1 {
		t.Errorf("owners seen: %v, want 50 without an owner", owners)
	}
	if logs := logged(); len(logs) != 1 || !strings.Contains(logs[0], "does not send packets' socket owners") {
		t.Errorf("logged %q, want one line saying owners are off", logs)
	}
}
