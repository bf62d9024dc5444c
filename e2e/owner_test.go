package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// The owner tests' traffic: each sender (a user, or a process in a cgroup)
// sends ownFlows UDP flows at ownPPS packets/s each for limDuration, into
// a rule of limRate packets/s and burst limBurst per owner, from the
// OUTPUT chain of namespace A, where packetshaper runs.
const (
	ownFlows = 2
	ownPPS   = 250
)

// ownerSendArgs are psend send's arguments for the sender whose flows
// start at source port sport.
func ownerSendArgs(tp *topo, sport int) []string {
	return []string{"send", "--dst", tp.IPB + ":9000", "--flows", fmt.Sprint(ownFlows), "--sport", fmt.Sprint(sport),
		"--pps", fmt.Sprint(ownPPS), "--duration", limDuration.String(), "--times"}
}

// mergedTimes are the send times of all of a sender's flows, in µs after
// its first packet, in order: one owner's packets share one bucket.
func mergedTimes(s sendResult) []int64 {
	var first int64 = -1
	for _, f := range s.Flows {
		if first < 0 || f.FirstNs < first {
			first = f.FirstNs
		}
	}
	var ts []int64
	for _, f := range s.Flows {
		for _, t := range f.TimesUs {
			ts = append(ts, (f.FirstNs-first)/1000+t)
		}
	}
	slices.Sort(ts)
	return ts
}

// received sums what the receiver got from a sender's flows.
func received(r recvResult, s sendResult) uint64 {
	var n uint64
	for port := range s.Flows {
		n += r.Received["9000"][port]
	}
	return n
}

// checkOwnerLimited checks that a limited sender's packets that arrived
// are what one token bucket of limRate and limBurst lets through of all its
// flows together: burst + rate × duration within 5 %, against an ideal
// bucket over the actual send times (a stalled sender wastes tokens).
func checkOwnerLimited(t *testing.T, who string, s sendResult, got uint64) {
	t.Helper()
	want := expectTokenBucket(mergedTimes(s))
	checkWithin(t, who+": an ideal token bucket over the actual send times vs burst + rate × duration", want, limLiteral, 0.05)
	checkWithin(t, fmt.Sprintf("%s: one bucket for its %d flows (sent %d)", who, len(s.Flows), s.Sent), float64(got), want, 0.05)
	if float64(s.Sent) < 0.95*ownFlows*ownPPS*limDuration.Seconds() {
		t.Errorf("%s sent %d packets, want about %.0f: the test shows nothing", who, s.Sent, ownFlows*ownPPS*limDuration.Seconds())
	}
}

// ownerListing lists packetshaper's flows through its control socket.
func ownerListing(t *testing.T, tp *topo, ns, sock string) map[string]control.Flow {
	t.Helper()
	fs := map[string]control.Flow{}
	for _, f := range tp.flowsListing(ns, sock) {
		fs[f.Key] = f
	}
	return fs
}

// ownerResult is what one ownerRun saw: each sender's result, what
// arrived, the flows listed at the end and the shaper's log.
type ownerResult struct {
	sent   []sendResult
	r      recvResult
	listed map[string]control.Flow
	log    string
}

// ownerRun runs packetshaper on A's queue 0 with rules (each given pps
// limRate and burst limBurst), a receiver on :9000 and n senders, sender
// i as sender(i) names it and wraps psend (the prefix of its command
// line), from source port 11000+1000×i; it waits for them all and lists
// the flows before it stops the shaper.
func ownerRun(t *testing.T, tp *topo, rules string, sender func(i int) (string, []string), n int) ownerResult {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	writePolicy(t, pol, fmt.Sprintf("%spps = %v\nburst = %v\n", rules, limRate, limBurst))
	sock := filepath.Join(dir, "ps.sock")
	sh := tp.startShaperIn(tp.A, "--queue", "0", "--policy", pol, "--control-socket", sock, "--stats-interval", "0", "--rt-priority", "1")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	var senders []*proc
	for i := 0; i < n; i++ {
		name, prefix := sender(i)
		senders = append(senders, tp.start(tp.A, name, append(prefix, ownerSendArgs(tp, 11000+1000*i)...)...))
	}
	var res ownerResult
	for _, p := range senders {
		res.sent = append(res.sent, sendDone(p))
	}
	res.r = recvDone(rc, 35*time.Second)
	res.listed = ownerListing(t, tp, tp.A, sock)
	res.log = tp.stopShaper(sh)
	return res
}

// TestOwnerUIDKey (issue 21): three users (numeric uids, set with
// setpriv: no user is created) send UDP from the OUTPUT chain of A through
// a rule that matches uids 1001-1002, keyed by uid, pps 100: each of the
// two gets 5 + 100 × T (±5 %) over its two flows together, and the flow
// listing names them "uid 1001" and "uid 1002"; uid 1003, outside the
// match, is not limited.
func TestOwnerUIDKey(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	psend := publicCopy(t, psendBin)
	tp.rulesIn(tp.A, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	run := ownerRun(t, tp, `
[[rule]]
name = "users"
match = { uid = ["1001-1002"] }
key = "uid"
`, func(i int) (string, []string) {
		uid := fmt.Sprint(1001 + i)
		return "psend as uid " + uid, []string{"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", psend}
	}, 3)
	sent, r, listed, log := run.sent, run.r, run.listed, run.log

	for i, uid := range []int{1001, 1002} {
		got := received(r, sent[i])
		checkOwnerLimited(t, fmt.Sprintf("uid %d", uid), sent[i], got)
		f, ok := listed[fmt.Sprintf("uid %d", uid)]
		switch {
		case !ok:
			t.Errorf("no flow \"uid %d\" in the listing: %v", uid, listed)
		case f.Rule != "users" || f.Accepted != got:
			t.Errorf("flow \"uid %d\": rule %q, accepted %d; want users, %d (what arrived)", uid, f.Rule, f.Accepted, got)
		}
	}
	if len(listed) != 2 {
		t.Errorf("%d flows listed, want 2 (one per limited user): %v", len(listed), listed)
	}
	other := received(r, sent[2])
	t.Logf("uid 1003 (outside the match): sent %d, received %d", sent[2].Sent, other)
	if other != sent[2].Sent {
		t.Errorf("uid 1003 is outside the rule's match: sent %d, received %d; want all", sent[2].Sent, other)
	}
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	var total uint64
	for _, s := range sent {
		total += s.Sent
	}
	if acc+drop != total || acc != received(r, sent[0])+received(r, sent[1])+other {
		t.Errorf("packetshaper accepted %d and dropped %d of %d sent: not every packet went through it", acc, drop, total)
	}
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup,
// or /sys/fs/cgroup/unified on a hybrid system; "" if nowhere.
func cgroup2Root() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			if _, err := os.Stat(filepath.Join(p, "cgroup.controllers")); err == nil {
				return p
			}
		}
	}
	return ""
}

// TestOwnerMarkKey (issue 21): the service limit. Two cgroups (made by the
// test, as systemd makes one per service) each hold a sender; in A's
// mangle OUTPUT, iptables' cgroup match marks each one's packets (0x1,
// 0x2), and a packetshaper rule keyed by mark holds each cgroup to 5 + 100
// × T (±5 %) over its two flows together.
func TestOwnerMarkKey(t *testing.T) {
	parallel(t)
	needShaper(t)
	root := cgroup2Root()
	if root == "" {
		t.Fatal("no cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified): the iptables cgroup --path match needs one")
	}
	tp := newTopo(t)
	psend := publicCopy(t, psendBin)
	var groups []string
	for _, g := range []string{"a", "b"} {
		name := fmt.Sprintf("pstest-%d-%s", os.Getpid(), g)
		path := filepath.Join(root, name)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		// Registered after the senders' own cleanups (which kill them),
		// so it runs after them: an empty cgroup can go.
		t.Cleanup(func() {
			deadline := time.Now().Add(5 * time.Second)
			for os.Remove(path) != nil && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := os.Stat(path); err == nil {
				t.Errorf("cgroup %s not removed", path)
			}
		})
		groups = append(groups, name)
	}
	for i, g := range groups {
		tp.must(tp.A, "iptables", "-w", "-t", "mangle", "-A", "OUTPUT", "-m", "cgroup", "--path", g, "-j", "MARK", "--set-mark", fmt.Sprint(i+1))
	}
	tp.rulesIn(tp.A, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	run := ownerRun(t, tp, `
[[rule]]
name = "services"
match = { mark = "0x0/0xfffffffc" }
key = "mark"
key-mark-mask = "0x3"
`, func(i int) (string, []string) {
		// The shell joins the cgroup, then becomes psend: its sockets
		// belong to the cgroup from the start. ip netns exec mounts a
		// sysfs of its own, without the cgroup mounts: the shell mounts
		// the cgroup v2 hierarchy there (in ip netns exec's mount
		// namespace only) to reach the group.
		script := fmt.Sprintf(`mount -t cgroup2 none /sys/fs/cgroup && echo $$ > /sys/fs/cgroup/%s/cgroup.procs && exec "$@"`, groups[i])
		return "psend in cgroup " + groups[i], []string{"sh", "-c", script, "sh", psend}
	}, len(groups))
	sent, r, listed, log := run.sent, run.r, run.listed, run.log
	for i, g := range groups {
		got := received(r, sent[i])
		checkOwnerLimited(t, "cgroup "+g, sent[i], got)
		key := fmt.Sprintf("mark 0x%d", i+1)
		if f, ok := listed[key]; !ok || f.Accepted != got {
			t.Errorf("flow %q: %+v (listed: %v); want it, with %d accepted", key, f, ok, got)
		}
	}
	if len(listed) != 2 {
		t.Errorf("%d flows listed, want 2 (one per cgroup's mark): %v", len(listed), listed)
	}
	acc, drop, line := finalStats(t, log)
	t.Logf("final stats: %s", line)
	if acc+drop != sent[0].Sent+sent[1].Sent {
		t.Errorf("packetshaper accepted %d and dropped %d of %d sent: not every packet went through it", acc, drop, sent[0].Sent+sent[1].Sent)
	}
}

// TestOwnerNoOwnerOneFlow (issue 21): incoming packets have no socket
// owner. Diverted from B's INPUT chain into a rule keyed by uid, two
// senders' flows (from A, another host as far as B is concerned) are one
// flow, "no owner", held together to 5 + 100 × T (±5 %): having no owner
// is never a way around a per-user limit.
func TestOwnerNoOwnerOneFlow(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newShapedTopo(t, fmt.Sprintf("[[rule]]\nname = \"users\"\nkey = \"uid\"\npps = %v\nburst = %v\n", limRate, limBurst))
	sock := tp.Sock
	sh := tp.startShaped("--rt-priority", "1")
	rc := tp.startRecv(":9000", "--duration", "30s", "--idle", "3s")
	s := sendDone(tp.start(tp.A, "psend send", append([]string{psendBin}, ownerSendArgs(tp.topo, 11000)...)...))
	r := recvDone(rc, 35*time.Second)
	listed := ownerListing(t, tp.topo, tp.B, sock)
	log := tp.stopShaper(sh)
	got := received(r, s)
	checkOwnerLimited(t, "incoming packets (no owner)", s, got)
	if f, ok := listed["no owner"]; !ok || len(listed) != 1 || f.Accepted != got {
		t.Errorf("listing %v: want one flow, \"no owner\", with %d accepted", listed, got)
	}
	if !strings.Contains(log, `share one flow, \"no owner\"`) && !strings.Contains(log, `share one flow, "no owner"`) {
		t.Errorf("packetshaper's log does not say what ownerless packets get:\n%s", indent(log))
	}
}
