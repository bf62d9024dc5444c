//go:build linux

package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/fastpath"
)

// loadFast loads the fast path of text as startFastpath does, attached
// nowhere (packets are run through BPF_PROG_TEST_RUN), with its flow
// counting not started (the test calls countFlows).
func loadFast(t *testing.T, text string) *fastPath {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: loading eBPF programs needs CAP_BPF/CAP_NET_ADMIN")
	}
	f, o := compile(t, text).Source()
	spec, _, err := fastpath.Compile(f, o)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := fastpath.Load(spec)
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("the kernel does not support the program: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	fp := &fastPath{log: slog.New(slog.NewTextHandler(io.Discard, nil)), punt: spec.PuntMark, prog: prog, index: kernelRules(spec), carry: map[string]carried{}}
	t.Cleanup(fp.close)
	return fp
}

// sendFast runs one UDP packet from 11.0.x.y (i) to 10.8.0.1:9000 through
// fp's program.
func sendFast(t *testing.T, fp *fastPath, i int) {
	t.Helper()
	b := make([]byte, 14+28)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], 28)
	copy(ip[12:], []byte{11, 0, byte(i >> 8), byte(i)})
	copy(ip[16:], []byte{10, 8, 0, 1})
	binary.BigEndian.PutUint16(ip[20:], 5000)
	binary.BigEndian.PutUint16(ip[22:], 9000)
	binary.BigEndian.PutUint16(ip[24:], 8)
	fp.mu.Lock()
	p := fp.prog.Prog()
	fp.mu.Unlock()
	if _, err := p.Run(&ebpf.RunOptions{Data: b}); err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
}

// TestFastpathFlowCounts: a kernel limit rule's flows and evictions, as
// status, the metrics and the stats line get them (counts): the flows its
// LRU map holds, and the flows it inserted less those, which a reload
// keeping the rule's map carries on and one changing the rule starts
// afresh (its old flows dropped, not evicted); the listing streams the
// map's flows, path kernel. Counting, listing and reading the counts run
// at once (go test -race).
func TestFastpathFlowCounts(t *testing.T) {
	const sources = 300
	pol := rule("k", udpDport(9000), "pps = 10", "burst = 10", `key = "src"`, "max-flows = 128")
	fp := loadFast(t, pol)
	for i := range sources {
		sendFast(t, fp, i)
	}
	fp.countFlows()
	k, ok := fp.counts("k")
	if !ok || !k.kernel || k.Packets != sources || k.Flows == 0 || k.Flows > 128 || k.Flows+k.Evictions != sources {
		t.Fatalf("counts: %+v (%v); want %d packets, 1..128 flows, flows + evictions = %d, kernel", k, ok, sources, sources)
	}
	list := func(rule string) []control.Flow {
		var fs []control.Flow
		if err := fp.listFlows(context.Background(), rule, func(f *control.Flow) error { fs = append(fs, *f); return nil }); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	fs := list("")
	if uint64(len(fs)) != k.Flows || fs[0].Path != pathKernel || fs[0].Rule != "k" || fs[0].Left < 9 || fs[0].Left > 10 || fs[0].Unit != "packets" {
		t.Errorf("listing: %d flows, the first %+v; want %d of rule k, path kernel, 9 packets left (and what came since)", len(fs), fs[0], k.Flows)
	}
	if fs := list("other"); len(fs) != 0 {
		t.Errorf("listing of another rule: %d flows", len(fs))
	}

	// Counting, listing and the snapshots' reads at once.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 20 {
				fp.countFlows()
				fp.counts("k")
				list("k")
			}
		})
	}
	wg.Wait()

	// A reload keeping the rule: its flows and evictions go on.
	if err := fp.reload(compile(t, pol)); err != nil {
		t.Fatal(err)
	}
	fp.countFlows()
	if k2, _ := fp.counts("k"); k2.Flows != k.Flows || k2.Evictions != k.Evictions || k2.Packets != sources {
		t.Errorf("after a reload keeping the rule: %+v; want %d flows, %d evictions, %d packets", k2, k.Flows, k.Evictions, sources)
	}
	// A reload changing it: an empty map; its old flows were dropped,
	// not evicted.
	if err := fp.reload(compile(t, strings.Replace(pol, "pps = 10", "pps = 20", 1))); err != nil {
		t.Fatal(err)
	}
	fp.countFlows()
	if k3, _ := fp.counts("k"); k3.Flows != 0 || k3.Evictions != k.Evictions || !k3.kernel {
		t.Errorf("after a reload changing the rule: %+v; want 0 flows, %d evictions", k3, k.Evictions)
	}
	sendFast(t, fp, 0)
	fp.countFlows()
	if k4, _ := fp.counts("k"); k4.Flows != 1 || k4.Evictions != k.Evictions {
		t.Errorf("a new flow after the reload: %+v; want 1 flow, %d evictions", k4, k.Evictions)
	}
}

// TestFastpathTotalCounts: a total whose rules all run in the kernel is
// counted there; status, the metrics and the stats line get its counts
// (totalCounts, added to the engine's by addFast), those of the programs
// reloads replaced carried on.
func TestFastpathTotalCounts(t *testing.T) {
	const sources, burst = 20, 5
	pol := "[[total]]\nname = \"up\"\npps = 1\nburst = 5\n" +
		rule("k", udpDport(9000), "pps = 100", "burst = 100", `key = "src"`, `total = "up"`)
	fp := loadFast(t, pol)
	if _, ok := fp.index["k"]; !ok {
		t.Fatalf("rule k is not a kernel rule: %v", fp.index)
	}
	for i := range sources {
		sendFast(t, fp, i)
	}
	k, ok := fp.totalCounts("up")
	// 1/s refills at most a packet or two while the test runs.
	if !ok || k.Packets != sources || k.Accepted < burst || k.Accepted > burst+2 || k.Accepted+k.Dropped != sources {
		t.Fatalf("total up: %+v (%v); want %d packets, %d-%d accepted, the rest dropped", k, ok, sources, burst, burst+2)
	}
	if _, ok := fp.totalCounts("other"); ok {
		t.Error("a total the program does not decide has counts")
	}
	// A reload keeping the total: the new program's counters start at
	// zero, the old program's are carried.
	if err := fp.reload(compile(t, pol)); err != nil {
		t.Fatal(err)
	}
	sendFast(t, fp, 0)
	if k2, _ := fp.totalCounts("up"); k2.Packets != sources+1 || k2.Accepted+k2.Dropped != sources+1 || k2.Accepted < k.Accepted {
		t.Errorf("after a reload: %+v; want %d packets (%+v before)", k2, sources+1, k)
	}
}
