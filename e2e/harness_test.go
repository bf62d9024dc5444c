package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/internal/timing"
)

var (
	// Paths of the binaries built once by TestMain, and why a build failed.
	binDir, psendBin, shaperBin string
	shaperBuildErr              error
	repoRoot                    string
	rulesScript                 string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	setParallel()
	if os.Geteuid() != 0 {
		// Each test skips with the message; nothing to build.
		return m.Run()
	}
	var err error
	if repoRoot, err = filepath.Abs(".."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	rulesScript = filepath.Join(repoRoot, "scripts", "rules.sh")
	binDir, err = os.MkdirTemp("", "packetshaper-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	removeStaleNamespaces()
	psendBin = filepath.Join(binDir, "psend")
	shaperBin = filepath.Join(binDir, "packetshaper")
	if out, err := goBuild(psendBin, "./internal/cmd/psend"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./internal/cmd/psend: %v\n%s", err, out)
		return 1
	}
	if out, err := goBuild(shaperBin, "./cmd/packetshaper"); err != nil {
		shaperBuildErr = fmt.Errorf("go build ./cmd/packetshaper: %v\n%s", err, out)
	}
	return m.Run()
}

// nsPrefix starts the name of every namespace the tests create; the name
// goes on with the test process's pid, so that a later run can tell the
// namespaces of a crashed run (pid gone) from those of a concurrent one.
const nsPrefix = "pse-"

// removeStaleNamespaces deletes the namespaces left behind by an earlier run
// that died before its cleanup (killed by the go test timeout, say): those
// whose creator's pid no longer exists. Names of the older form without a pid
// ("pse-HEX-a") go only when no process is inside.
func removeStaleNamespaces() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		ns := f[0]
		parts := strings.Split(strings.TrimPrefix(ns, nsPrefix), "-")
		switch {
		case len(parts) == 3: // pid-HEX-a|b
			pid, err := strconv.Atoi(parts[0])
			if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
				continue
			}
		case len(parts) == 2: // HEX-a|b, from before the pid was in the name
			if pids, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output(); err != nil || len(bytes.TrimSpace(pids)) != 0 {
				continue
			}
		default:
			continue
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "del", ns).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: removing stale namespace %s: %v: %s", ns, err, out)
		} else {
			fmt.Fprintf(os.Stderr, "e2e: removed stale namespace %s (left by a run that did not clean up)\n", ns)
		}
	}
}

// cmdTimeout bounds the setup commands the harness runs to completion.
const cmdTimeout = 30 * time.Second

func goBuild(out, pkg string) ([]byte, error) {
	// sudo may drop /usr/local/go/bin from PATH: fall back to it.
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	return cmd.CombinedOutput()
}

// needRoot skips t unless it runs as root, and fails it if a tool the
// tests need is missing (CI must have them: a missing tool is not a skip).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: needs root to create network namespaces and firewall rules; run `sudo go test ./e2e/` (CI runs as root)")
	}
	for _, tool := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e: %s not found in PATH (apt-get install iproute2 iptables)", tool)
		}
	}
}

// needShaper is needRoot plus a packetshaper binary.
func needShaper(t *testing.T) {
	t.Helper()
	needRoot(t)
	if shaperBuildErr != nil {
		t.Fatal(shaperBuildErr)
	}
}

// topo is two network namespaces, A (sender) and B (receiver, where
// packetshaper runs), joined by a veth pair, with IPv4 and IPv6 addresses
// that exist only inside them.
type topo struct {
	t    *testing.T
	A, B string // namespace names
	// Addresses of A and B.
	IPA, IPB, IP6A, IP6B string
	// The veth pair's ends, in A and in B.
	VethA, VethB string
	// Env is added to the environment of every process start runs (the
	// test variables packetshaper reads): t.Setenv would keep the test
	// from running beside others (parallel).
	Env []string
}

// newTopo creates the namespaces and registers their removal (and that of
// everything in them: veth, rules, bound queues) with t.Cleanup.
func newTopo(t *testing.T) *topo {
	t.Helper()
	needExclusiveUnlessParallel(t)
	id, ns := newNamespaces(t, "a", "b")
	tp := &topo{
		t: t, A: ns[0], B: ns[1],
		IPA: "10.213.0.1", IPB: "10.213.0.2", IP6A: "fd00:213::1", IP6B: "fd00:213::2",
	}
	vA, vB := "pse"+id+"a", "pse"+id+"b"
	tp.VethA, tp.VethB = vA, vB
	tp.host("ip", "link", "add", vA, "netns", tp.A, "type", "veth", "peer", "name", vB, "netns", tp.B)
	tp.addrUp(tp.A, vA, tp.IPA+"/24", tp.IP6A+"/64")
	tp.addrUp(tp.B, vB, tp.IPB+"/24", tp.IP6B+"/64")
	// The link may take a moment to come up (carrier, IPv6 neighbour
	// discovery): the first ping can be lost.
	tp.pingB(5, "veth link")
	return tp
}

// newNamespaces creates a network namespace for each suffix ("a", "b",
// ...), named nsPrefix, the test process's pid, a random id and the
// suffix, registers its removal with t.Cleanup (testutil.NewNetns), and
// returns the id (for the names of veths) and the namespaces' names.
func newNamespaces(t *testing.T, suffixes ...string) (id string, names []string) {
	t.Helper()
	var rb [3]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	id = hex.EncodeToString(rb[:])
	for _, s := range suffixes {
		ns := fmt.Sprintf("%s%d-%s-%s", nsPrefix, os.Getpid(), id, s)
		testutil.NewNetns(t, ns)
		names = append(names, ns)
	}
	return id, names
}

// addrUp gives dev in ns the IPv4 and IPv6 addresses ip4 and ip6 (with
// their prefix lengths; IPv6 without duplicate address detection) and
// brings it up.
func (tp *topo) addrUp(ns, dev, ip4, ip6 string) {
	tp.t.Helper()
	tp.must(ns, "ip", "addr", "add", ip4, "dev", dev)
	tp.must(ns, "ip", "-6", "addr", "add", ip6, "dev", dev, "nodad")
	tp.must(ns, "ip", "link", "set", dev, "up")
}

// pingB pings B's IPv4 and IPv6 addresses from A, each up to tries times
// 200 ms apart, and fails the test ("the <what> does not work") if one
// never answers.
func (tp *topo) pingB(tries int, what string) {
	tp.t.Helper()
	for _, args := range [][]string{{"ping", "-c", "1", "-W", "1", tp.IPB}, {"ping", "-6", "-c", "1", "-W", "1", tp.IP6B}} {
		var out string
		var err error
		for try := 0; try < tries; try++ {
			if out, err = tp.run(tp.A, args...); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			tp.t.Fatalf("the %s does not work: [%s] %s: %v\n%s", what, tp.A, strings.Join(args, " "), err, out)
		}
	}
}

// host runs a command in the host namespace (only ip netns/link to set
// up our namespaces) and fails the test on error.
func (tp *topo) host(args ...string) {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		tp.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// run runs a command inside ns, bounded to 60 s, and returns its combined
// output.
func (tp *topo) run(ns string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// must is run that fails the test on error.
func (tp *topo) must(ns string, args ...string) string {
	tp.t.Helper()
	out, err := tp.run(ns, args...)
	if err != nil {
		tp.t.Fatalf("[%s] %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// rules runs scripts/rules.sh add|del ... --netns B.
func (tp *topo) rules(args ...string) string {
	tp.t.Helper()
	return tp.rulesIn(tp.B, args...)
}

// rulesIn runs scripts/rules.sh add|del ... --netns ns.
func (tp *topo) rulesIn(ns string, args ...string) string {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, rulesScript, append(args, "--netns", ns)...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("rules.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// proc is a process started in a namespace.
type proc struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	out, err testutil.SyncBuffer
	done     chan struct{}
	waitErr  error
}

// start runs a command inside ns in the background (it is exec'd by ip
// netns exec, so signals reach it directly). It is killed after 90 s
// whatever happens, in t.Cleanup if still running, and by the kernel if the
// test process dies first (Pdeathsig).
func (tp *topo) start(ns, name string, args ...string) *proc {
	tp.t.Helper()
	p := &proc{t: tp.t, name: name, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	p.cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if len(tp.Env) > 0 {
		p.cmd.Env = append(os.Environ(), tp.Env...)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		cancel()
		tp.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	tp.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if tp.t.Failed() || testing.Verbose() {
			tp.t.Logf("%s stderr:\n%s", name, indent(p.err.String()))
		}
	})
	return p
}

func indent(s string) string {
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// wait waits up to d for the process to exit and returns its exit error.
func (p *proc) wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %v\nstderr:\n%s", p.name, d, indent(p.err.String()))
		return nil
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitStderr waits up to d for stderr to contain s.
func (p *proc) waitStderr(s string, d time.Duration) {
	p.t.Helper()
	has := func() bool { return strings.Contains(p.err.String(), s) }
	if !testutil.WaitFor(p.t, d, func() bool { return has() || p.exited() }) || !has() {
		p.t.Fatalf("%s: no %q on stderr within %v (exited: %v)\nstderr:\n%s", p.name, s, d, p.exited(), indent(p.err.String()))
	}
}

// waitStdout waits up to d for stdout to contain s.
func (p *proc) waitStdout(s string, d time.Duration) {
	p.t.Helper()
	has := func() bool { return strings.Contains(p.out.String(), s) }
	if !testutil.WaitFor(p.t, d, func() bool { return has() || p.exited() }) || !has() {
		p.t.Fatalf("%s: no %q on stdout within %v (exited: %v)\nstdout:\n%s", p.name, s, d, p.exited(), indent(p.out.String()))
	}
}

// decode parses the process's stdout as one JSON object.
func (p *proc) decode(v any) {
	p.t.Helper()
	if err := json.Unmarshal([]byte(p.out.String()), v); err != nil {
		p.t.Fatalf("%s: stdout is not the expected JSON: %v\n%s\nstderr:\n%s", p.name, err, p.out.String(), indent(p.err.String()))
	}
}

// queueState is a line of /proc/net/netfilter/nfnetlink_queue.
type queueState struct {
	Bound                     bool
	PortID                    uint64
	Waiting                   uint64 // queue_total: packets waiting for a verdict
	QueueDropped, UserDropped uint64
	IDSequence                uint64 // last packet id: packets that went through the queue
}

// queue reads the state of NFQUEUE queue q inside ns B.
func (tp *topo) queue(q int) queueState {
	tp.t.Helper()
	return tp.queueIn(tp.B, q)
}

// queueIn reads the state of NFQUEUE queue q inside ns.
func (tp *topo) queueIn(ns string, q int) queueState {
	tp.t.Helper()
	out := tp.must(ns, "cat", "/proc/net/netfilter/nfnetlink_queue")
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[0] != strconv.Itoa(q) {
			continue
		}
		n := make([]uint64, 8)
		for i := 1; i < 8; i++ {
			n[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		return queueState{Bound: true, PortID: n[1], Waiting: n[2], QueueDropped: n[5], UserDropped: n[6], IDSequence: n[7]}
	}
	return queueState{}
}

// waitBound waits until queue q in B is bound (by the process p).
func (tp *topo) waitBound(p *proc, q int) {
	tp.t.Helper()
	tp.waitBoundIn(tp.B, p, q)
}

// waitBoundIn waits until queue q in ns is bound (by the process p).
func (tp *topo) waitBoundIn(ns string, p *proc, q int) {
	tp.t.Helper()
	bound := false
	testutil.WaitFor(tp.t, 10*time.Second, func() bool { bound = tp.queueIn(ns, q).Bound; return bound || p.exited() })
	switch {
	case bound:
	case p.exited():
		tp.t.Fatalf("%s exited before binding queue %d: %v\nstderr:\n%s", p.name, q, p.waitErr, indent(p.err.String()))
	default:
		tp.t.Fatalf("%s did not bind queue %d within 10 s\nstderr:\n%s", p.name, q, indent(p.err.String()))
	}
}

// startShaper runs packetshaper in B with args and waits until it has bound
// queue 0.
func (tp *topo) startShaper(args ...string) *proc {
	tp.t.Helper()
	return tp.startShaperIn(tp.B, args...)
}

// startShaperIn runs packetshaper in ns with args and waits until it has
// bound queue 0 and logged its startup line (which comes after its control
// socket and metrics server are up), or exited.
func (tp *topo) startShaperIn(ns string, args ...string) *proc {
	tp.t.Helper()
	p := tp.start(ns, "packetshaper", append([]string{shaperBin}, args...)...)
	tp.waitBoundIn(ns, p, 0)
	testutil.WaitFor(tp.t, 10*time.Second, func() bool {
		s := p.err.String()
		return strings.Contains(s, "msg=shaping") || strings.Contains(s, `"msg":"shaping"`) || p.exited()
	})
	return p
}

// stopShaper sends SIGTERM and requires a clean exit (status 0) within 5 s
// (and, a timing figure, within a second plus scheduling slack), then
// returns its stderr.
func (tp *topo) stopShaper(p *proc) string {
	tp.t.Helper()
	t0 := time.Now()
	p.signal(syscall.SIGTERM)
	if err := p.wait(5 * time.Second); err != nil {
		tp.t.Fatalf("packetshaper exited with %v after SIGTERM\nstderr:\n%s", err, indent(p.err.String()))
	}
	d := time.Since(t0)
	timing.Check(tp.t, d <= 1500*time.Millisecond, "packetshaper took %v to exit after SIGTERM, want about 1 s at most", d)
	return p.err.String() + p.out.String()
}

// sendResult and recvResult mirror psend's JSON output.
type sendResult struct {
	Flows   map[string]sendFlow `json:"flows"`
	Sent    uint64              `json:"sent"`
	Errors  uint64              `json:"errors"`
	Seconds float64             `json:"seconds"`
}

// sendFlow is one flow of a sendResult.
type sendFlow struct {
	Sent    uint64            `json:"sent"`
	FirstNs int64             `json:"first_ns"`
	LastNs  int64             `json:"last_ns"`
	Windows map[string]uint64 `json:"windows"`
	TimesUs []int64           `json:"times_us"`
}

type recvResult struct {
	Received map[string]map[string]uint64 `json:"received"`
	Total    uint64                       `json:"total"`
	FirstNs  int64                        `json:"first_ns"`
	LastNs   int64                        `json:"last_ns"`
	// With --times: arrival and kernel receive times per port and source
	// port (ns since the epoch).
	TimesNs map[string]map[string][]int64 `json:"times_ns"`
	RxNs    map[string]map[string][]int64 `json:"rx_ns"`
	Seqs    map[string]map[string][]int64 `json:"seqs"` // psend send --seq
	// Bins counts datagrams per --bins interval, by its start (ns).
	Bins map[string]uint64 `json:"bins"`
}

// startRecv starts psend recv in B on the given ports (comma-separated
// [IP]:PORT list) and waits until it listens.
func (tp *topo) startRecv(listen string, extra ...string) *proc {
	tp.t.Helper()
	p := tp.start(tp.B, "psend recv", append([]string{psendBin, "recv", "--listen", listen}, extra...)...)
	p.waitStderr("listening", 5*time.Second)
	return p
}

// send runs psend send in A to completion.
func (tp *topo) send(args ...string) sendResult {
	tp.t.Helper()
	return sendDone(tp.startSend(args...))
}

// startSend starts psend send in A and returns at once; sendDone collects
// its result. Everything that can fail the test happens in sendDone, which
// must be called on the test's goroutine.
func (tp *topo) startSend(args ...string) *proc {
	tp.t.Helper()
	return tp.start(tp.A, "psend send", append([]string{psendBin, "send"}, args...)...)
}

// sendDone waits for a sender started by startSend and returns its counts.
func sendDone(p *proc) sendResult {
	p.t.Helper()
	if err := p.wait(70 * time.Second); err != nil {
		p.t.Fatalf("psend send: %v\n%s", err, indent(p.err.String()))
	}
	var r sendResult
	p.decode(&r)
	if r.Errors != 0 {
		p.t.Errorf("psend send: %d send errors", r.Errors)
	}
	return r
}

// udpRcvbufErrors reads the UDP RcvbufErrors counter of /proc/net/snmp in
// ns: datagrams the kernel dropped because a socket's receive buffer was
// full.
func (tp *topo) udpRcvbufErrors(ns string) uint64 { return tp.udpSNMP(ns, "RcvbufErrors") }

// udpSNMP reads the counter name of the "Udp:" lines of /proc/net/snmp in
// ns (IPv4).
func (tp *topo) udpSNMP(ns, name string) uint64 { return tp.snmp(ns, "Udp:", name) }

// snmp reads the counter name of group's lines ("Udp:", "Icmp:") of
// /proc/net/snmp in ns.
func (tp *topo) snmp(ns, group, name string) uint64 {
	tp.t.Helper()
	out := tp.must(ns, "cat", "/proc/net/snmp")
	var head []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != group {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, h := range head {
			if h == name && i < len(f) {
				n, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					tp.t.Fatalf("/proc/net/snmp in %s: %s %q: %v", ns, name, f[i], err)
				}
				return n
			}
		}
		break
	}
	tp.t.Fatalf("/proc/net/snmp in %s: no %s %s counter:\n%s", ns, group, name, out)
	return 0
}

// recvDone waits for a receiver to stop by itself and returns its counts.
func recvDone(p *proc, d time.Duration) recvResult {
	p.t.Helper()
	if err := p.wait(d); err != nil {
		p.t.Fatalf("%s: %v\n%s", p.name, err, indent(p.err.String()))
	}
	var r recvResult
	p.decode(&r)
	return r
}

// stopRecv stops a receiver with SIGTERM and returns its counts.
func stopRecv(p *proc) recvResult {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	return recvDone(p, 5*time.Second)
}

var statRe = regexp.MustCompile(`(?:^|\s)(accepted|dropped|packets|flows)[=: ]+(\d+)`)

// finalStats parses the last line of packetshaper's log that carries
// accepted= and dropped= counters.
func finalStats(t *testing.T, log string) (accepted, dropped uint64, line string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		m := statRe.FindAllStringSubmatch(lines[i], -1)
		var gotA, gotD bool
		for _, kv := range m {
			n, _ := strconv.ParseUint(kv[2], 10, 64)
			switch kv[1] {
			case "accepted":
				accepted, gotA = n, true
			case "dropped":
				dropped, gotD = n, true
			}
		}
		if gotA && gotD {
			return accepted, dropped, lines[i]
		}
	}
	t.Fatalf("no stats line with accepted= and dropped= in packetshaper's log:\n%s", indent(log))
	return
}
