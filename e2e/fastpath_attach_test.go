package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// shaperStatus reads packetshaper status --json from the control socket
// sock in B.
func shaperStatus(t *testing.T, tp *topo, sock string) control.Status {
	t.Helper()
	var st control.Status
	if err := json.Unmarshal([]byte(tp.must(tp.B, shaperBin, "status", "--control-socket", sock, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// recreateVeth deletes the veth pair (B's end with it: a container or a
// VPN restarting) and makes it again under the same names and addresses.
func recreateVeth(tp *topo) {
	tp.t.Helper()
	tp.must(tp.B, "ip", "link", "del", tp.VethB)
	tp.host("ip", "link", "add", tp.VethA, "netns", tp.A, "type", "veth", "peer", "name", tp.VethB, "netns", tp.B)
	for _, s := range []struct{ ns, dev, ip4 string }{{tp.A, tp.VethA, tp.IPA}, {tp.B, tp.VethB, tp.IPB}} {
		tp.must(s.ns, "ip", "addr", "add", s.ip4+"/24", "dev", s.dev)
		tp.must(s.ns, "ip", "link", "set", s.dev, "up")
	}
}

// TestFastpathRecreated: the interface --fastpath names is deleted and
// made again under the same name (tcx and tc): 2 s later the kernel rule
// limits it again, each flow what the ideal token bucket lets through of
// its send times (±5 %; unattached, all 1 000 would pass); one log line
// says it was attached again, and status shows the link attached at the
// new index, reattached once.
func TestFastpathRecreated(t *testing.T) { forModes(t, testFastpathRecreated) }

func testFastpathRecreated(t *testing.T, mode string) {
	tp := newTopo(t)
	pol, sock := tp.divertFastpath(fastpathPolicy)
	sh := tp.startFastpathShaper(pol, "--fastpath-attach", mode, "--control-socket", sock)
	before := shaperStatus(t, tp, sock).Fastpath
	if len(before) != 1 || before[0].State != "attached" || before[0].Attach != mode {
		t.Fatalf("status before: %+v, want %s attached by %s", before, tp.VethB, mode)
	}
	recreateVeth(tp)
	// 2 s, noting when the log says it attached again (a figure for the
	// log, not a bound).
	const line = "fast path: interface re-created, attached again"
	t0 := time.Now()
	var seen time.Duration
	for time.Since(t0) < 2*time.Second {
		if seen == 0 && strings.Contains(sh.err.String(), line) {
			seen = time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc := tp.startRecv(":9000", "--duration", "20s", "--idle", "2s")
	s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "10000", "--pps", "500", "--duration", "2s", "--times")
	r := recvDone(rc, 25*time.Second)
	f := s.Flows["10000"]
	checkWithin(t, fmt.Sprintf("%s re-created, sent 2 s later: %d sent", tp.VethB, f.Sent), float64(r.Total), expectTokenBucket(f.TimesUs), 0.05)
	if n := strings.Count(sh.err.String(), line); n != 1 {
		t.Errorf("%d %q log lines, want 1:\n%s", n, line, indent(sh.err.String()))
	}
	t.Logf("re-created; the log said attached again %v after (0: not within 2 s)", seen)
	after := shaperStatus(t, tp, sock).Fastpath
	if len(after) != 1 || after[0].State != "attached" || after[0].Reattached != 1 || after[0].Ifindex == before[0].Ifindex || after[0].Attach != mode {
		t.Errorf("status after: %+v; want attached by %s at a new index, reattached once", after, mode)
	}
	if n := attached(t, tp, mode); n != 1 {
		t.Errorf("%d programs attached by %s at the re-created %s, want 1", n, mode, tp.VethB)
	}
	tp.stopShaper(sh)
	if n := attached(t, tp, mode); n != 0 {
		t.Errorf("%d programs attached by %s after SIGTERM, want none", n, mode)
	}
}

// TestFastpathRefusedReload: a reload whose program the kernel refuses
// (forced for a rule by the test variable; a blocklist over the address
// map's capacity is one such) fails whole: one error line, status counts
// it failed with the kernel's reason and still lists the old policy's
// rules, and both paths keep the old policy: the user-space rule's traffic,
// which the new policy's drop rule would block in user space while the old
// kernel program still punts it, is limited by the old sliding-window log
// (±5 % of its ideal), and the kernel rule's by its token bucket.
func TestFastpathRefusedReload(t *testing.T) {
	needShaper(t)
	parallel(t)
	tp := newTopo(t)
	tp.Env = append(tp.Env, "PACKETSHAPER_TEST_REFUSE_FASTPATH_RULE=block")
	pol, sock := tp.divertFastpath(fastpathPolicy)
	sh := tp.startFastpathShaper(pol, "--control-socket", sock)
	const block = `
[[rule]]
name   = "block"
match  = { proto = ["udp"], dport = ["9001"] }
action = "drop"
`
	if err := os.WriteFile(pol, []byte(block+fastpathPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	sh.signal(syscall.SIGHUP)
	sh.waitStderr("reload failed", 10*time.Second)
	st := shaperStatus(t, tp, sock)
	var names []string
	for _, r := range st.Rules {
		names = append(names, r.Name)
	}
	if st.Reloads.OK != 0 || st.Reloads.Failed != 1 || st.Reloads.Last == nil || !strings.Contains(st.Reloads.Last.Error, "refused") {
		t.Errorf("status reloads %+v (last %+v): want 0 ok, 1 failed, the kernel's refusal", st.Reloads, st.Reloads.Last)
	}
	if strings.Join(names, ",") != "kern,user" {
		t.Errorf("status lists rules %v after the failed reload, want the old policy's kern,user", names)
	}
	kern, user, r := tp.sendSplit()
	checkSplit(t, "after the refused reload, ", kern, user, r)
	log := tp.stopShaper(sh)
	if n := strings.Count(log, "level=ERROR"); n != 1 || !strings.Contains(log, "reload failed, keeping the previous policy") {
		t.Errorf("%d error lines, want the one of the failed reload:\n%s", n, indent(log))
	}
	if strings.Contains(log, "fast path reloaded") || strings.Contains(log, "msg=reloaded") {
		t.Errorf("a path took the refused reload:\n%s", indent(log))
	}
}

// mangleCount is the packet count of the mangle INPUT rule of B whose
// comment is comment.
func mangleCount(t *testing.T, tp *topo, comment string) uint64 {
	t.Helper()
	out := tp.must(tp.B, "iptables", "-w", "-t", "mangle", "-L", "INPUT", "-v", "-x", "-n")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "/* "+comment+" */") {
			n, err := strconv.ParseUint(strings.Fields(l)[0], 10, 64)
			if err != nil {
				t.Fatalf("mangle INPUT: %q: %v", l, err)
			}
			return n
		}
	}
	t.Fatalf("no mangle INPUT rule %q:\n%s", comment, out)
	return 0
}

// TestFastpathPuntMarkCleared: packets the program punts and user space
// accepts reach mangle INPUT without the punt mark (0 of N counted by a
// rule matching it there, N by one that does not look at the mark); a
// packet's other mark bits stay as they were.
func TestFastpathPuntMarkCleared(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	// One user-space rule far above the traffic: every packet accepted.
	const file = `
[[rule]]
name  = "user"
match = { proto = ["udp"], dport = ["9001"] }
algo  = "sliding-window"
pps   = 1000
max-flows = 16
`
	pol, _ := tp.divertFastpath(file)
	for _, r := range [][]string{
		{"-p", "udp", "--dport", "9001", "-m", "comment", "--comment", "ps-all"},
		{"-p", "udp", "--dport", "9001", "-m", "mark", "--mark", "0x40000000/0x40000000", "-m", "comment", "--comment", "ps-punt"},
	} {
		tp.must(tp.B, append([]string{"iptables", "-w", "-t", "mangle", "-A", "INPUT"}, r...)...)
	}
	sh := tp.startFastpathShaper(pol, "--control-socket", "")
	rc := tp.startRecv(":9001", "--duration", "20s", "--idle", "2s")
	s := tp.send("--dst", tp.IPB+":9001", "--flows", "2", "--sport", "10000", "--pps", "100", "--duration", "1s")
	r := recvDone(rc, 25*time.Second)
	log := tp.stopShaper(sh)
	all, punt := mangleCount(t, tp, "ps-all"), mangleCount(t, tp, "ps-punt")
	t.Logf("sent %d, received %d; at mangle INPUT %d, %d with the punt mark", s.Sent, r.Total, all, punt)
	if r.Total != s.Sent || all != s.Sent {
		t.Errorf("sent %d, %d reached mangle INPUT, %d received: want all (every packet accepted)", s.Sent, all, r.Total)
	}
	if punt != 0 {
		t.Errorf("%d of %d accepted packets still carry the punt mark at mangle INPUT, want 0", punt, all)
	}
	if _, _, line := finalStats(t, log); statField(t, line, "rule.user.accepted") != s.Sent {
		t.Errorf("the queue did not accept every packet: %s", line)
	}
}

// TestFastpathKernelMemory: the start line states the kernel maps' memory
// (kernel_maps_mib=, about 23 MiB for one limit rule of the default
// 65 536 flows: its map of flows and its map of new flows, 65 536 each, and
// the fragment map); a rule of max-flows 4 194 304 (about 650 MiB preallocated)
// is over the maximum: one line naming it, the whole policy through
// NFQUEUE, or with --fastpath-required a non-zero exit.
func TestFastpathKernelMemory(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	dir, pol := policyFile(t, fastpathPolicy)
	sh := tp.startFastpathShaper(pol, "--control-socket", "")
	m := regexp.MustCompile(`msg=shaping .*kernel_maps_mib=([0-9.]+)`).FindStringSubmatch(sh.err.String())
	if m == nil {
		t.Fatalf("no kernel_maps_mib= in the start line:\n%s", indent(sh.err.String()))
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v < 15 || v > 35 {
		t.Errorf("kernel_maps_mib=%s for one rule of 65 536 flows, want about 23", m[1])
	}
	tp.stopShaper(sh)

	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(strings.Replace(fastpathPolicy, "burst =", "max-flows = 4194304\nburst =", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	sh = tp.startFastpathShaper(big, "--control-socket", "")
	log := tp.stopShaper(sh)
	if n := strings.Count(log, "fast path off, the whole policy runs through NFQUEUE: the fast path's kernel maps would take"); n != 1 || !strings.Contains(log, `rule \"kern\" alone has max-flows 4194304`) {
		t.Errorf("%d lines refusing the kernel maps' size, want 1 naming rule kern:\n%s", n, indent(log))
	}
	p := tp.start(tp.B, "packetshaper", shaperBin, "--queue", "1", "--policy", big, "--fastpath", tp.VethB, "--fastpath-required", "--control-socket", "")
	if err := p.wait(10 * time.Second); err == nil || !strings.Contains(p.err.String(), "more than the 256 MiB maximum") {
		t.Errorf("--fastpath-required over the maximum: %v, %q; want a non-zero exit naming it", err, p.err.String())
	}
	if n := testutil.TCXPrograms(t, tp.B, tp.VethB); n != 0 {
		t.Errorf("%d programs left at tcx ingress", n)
	}
}
