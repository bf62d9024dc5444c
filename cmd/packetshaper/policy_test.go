package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFlagsArePolicy: the limiter flags are a one-rule policy: replay with
// them prints exactly what replay with the same rule in a file prints.
func TestFlagsArePolicy(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		rule  string
	}{
		{[]string{"--pps", "20", "--burst", "3", "--algo", "fixed-window"}, "pps = 20\nburst = 3\nalgo = \"fixed-window\"\n"},
		{[]string{"--bitrate", "40kbit", "--burst", "1500", "--key", "src-dst"}, "bitrate = \"40kbit\"\nburst = 1500\nkey = \"src-dst\"\n"},
		{[]string{"--pps", "30", "--key", "dst", "--dst-prefix4", "24", "--window", "500ms", "--algo", "sliding-window-counter"},
			"pps = 30\nkey = \"dst\"\ndst-prefix4 = 24\nwindow = \"500ms\"\nalgo = \"sliding-window-counter\"\n"},
		{[]string{"--pps", "10", "--max-flows", "2", "--flow-timeout", "2s", "--symmetric"}, "pps = 10\nmax-flows = 2\nflow-timeout = \"2s\"\nsymmetric = true\n"},
		{[]string{"--pps", "10", "--shape", "--max-delay", "300ms"}, "pps = 10\nshape = true\nmax-delay = \"300ms\"\n"},
		{[]string{"--pps", "10", "--algo", "leaky-bucket"}, "pps = 10\nshape = true\n"},
		{[]string{"--bitrate", "40kbit", "--shape"}, "bitrate = \"40kbit\"\nalgo = \"leaky-bucket\"\nmax-delay = \"50ms\"\n"},
	} {
		pol := writeFile(t, "p.toml", "[[rule]]\nname = \"default\"\n"+tc.rule)
		const capture = testdata + "/multiflow.pcap"
		var a, b, errb bytes.Buffer
		if code := run(append([]string{"replay", "--json"}, append(tc.flags, capture)...), &a, &errb); code != 0 {
			t.Fatalf("replay %q: %d %s", tc.flags, code, errb.String())
		}
		if code := run([]string{"replay", "--json", "--policy", pol, capture}, &b, &errb); code != 0 {
			t.Fatalf("replay --policy (%q): %d %s", tc.rule, code, errb.String())
		}
		if a.String() != b.String() {
			t.Errorf("flags %q print\n%s\nthe rule file prints\n%s", tc.flags, a.String(), b.String())
		}
	}
}

// TestPolicyStartupErrors: bad flags and bad rule files stop both commands
// at startup with exit status 2 and one line naming the problem.
func TestPolicyStartupErrors(t *testing.T) {
	bad := writeFile(t, "bad.toml", "[[rule]]\nname = \"a\"\npps = 10\n\n[[rule]]\nname = \"b\"\nalgo = \"leaky\"\npps = 1\n")
	unknown := writeFile(t, "unknown.toml", "[[rule]]\nname = \"a\"\npps = 10\nburts = 3\n")
	good := writeFile(t, "good.toml", "[[rule]]\nname = \"a\"\npps = 10\n")
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", bad}, bad + ":7:"},
		{[]string{"--policy", unknown}, unknown + ":4:1"},
		{[]string{"--policy", missing}, missing},
		{[]string{"--policy", good, "--pps", "5"}, "--policy and the limiter flags (--pps) are exclusive"},
		{[]string{"--burst", "3"}, "no limit given"},
		{[]string{"--pps", "-3"}, "--pps:"},
		{[]string{"--pps", "10", "--bitrate", "1mbit"}, "--"},
		{[]string{"--pps", "10", "--algo", "leaky"}, "--algo:"},
		{[]string{"--pps", "10", "--src-prefix4", "33"}, "--src-prefix4:"},
		{[]string{"--pps", "10", "--burst", "0.5"}, "--burst:"},
		{[]string{"--bitrate", "1mbit", "--algo", "sliding-window"}, "sliding-window"},
		{[]string{"--pps", "10", "--malformed", "maybe"}, "--malformed:"},
		{[]string{"--pps", "10", "--max-delay", "1s"}, "--max-delay needs --shape"},
		{[]string{"--pps", "10", "--shape", "--max-delay", "-1s"}, "--max-delay:"},
		{[]string{"--pps", "10", "--shape", "--max-delay", "20s"}, "--max-delay: must be at most 10s"},
		{[]string{"--pps", "10", "--shape", "--algo", "fixed-window"}, "--shape: only the token bucket shapes"},
		{[]string{"--pps", "10", "--global"}, "--global needs --redis"},
		{[]string{"--pps", "10", "--global-slack", "0.1"}, "--global-slack needs --global"},
		{[]string{"--pps", "10", "--global", "--redis", "r:6379", "--global-slack", "2"}, "--global-slack: must be more than 0 and at most 1"},
		{[]string{"--pps", "10", "--global", "--redis", "r"}, "--redis: bad address \"r\""},
		{[]string{"--pps", "10", "--global", "--redis-password-file", "/x"}, "--redis-password-file needs --redis"},
		{[]string{"--pps", "10", "--global", "--redis", "r:1", "--algo", "sliding-window"}, "--algo: a global rule is token-bucket or fixed-window"},
	} {
		for _, cmd := range []string{"packetshaper: ", "packetshaper replay: "} {
			args := tc.args
			if cmd == "packetshaper replay: " {
				args = append(append([]string{"replay"}, tc.args...), "x.pcap")
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			msg := errb.String()
			if code != 2 || !strings.HasPrefix(msg, cmd) || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want 2 and one line mentioning %q", args, code, msg, tc.want)
			}
		}
	}
}

// TestGlobalFlags: --global --redis make the one-rule policy's rule global
// (several addresses: a Redis Cluster), as the same rule file does; replay
// runs it as a local rule and says so.
func TestGlobalFlags(t *testing.T) {
	const capture = testdata + "/multiflow.pcap"
	pol := writeFile(t, "g.toml", "[redis]\naddrs = [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]\ncluster = true\n\n[[rule]]\nname = \"default\"\npps = 20\nscope = \"global\"\nglobal-slack = 0.1\n")
	local := writeFile(t, "l.toml", "[[rule]]\nname = \"default\"\npps = 20\n")
	var a, b, c, errA, errB, errC bytes.Buffer
	if code := run([]string{"replay", "--json", "--pps", "20", "--global", "--global-slack", "0.1", "--redis", "10.0.0.1:7000,10.0.0.2:7000", capture}, &a, &errA); code != 0 {
		t.Fatalf("replay --global: %d %s", code, errA.String())
	}
	if code := run([]string{"replay", "--json", "--policy", pol, capture}, &b, &errB); code != 0 {
		t.Fatalf("replay --policy: %d %s", code, errB.String())
	}
	if code := run([]string{"replay", "--json", "--policy", local, capture}, &c, &errC); code != 0 {
		t.Fatalf("replay local: %d %s", code, errC.String())
	}
	if a.String() != b.String() {
		t.Errorf("--global flags print\n%s\nthe rule file prints\n%s", a.String(), b.String())
	}
	var rep, loc jsonReport
	if err := json.Unmarshal(a.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(c.Bytes(), &loc); err != nil {
		t.Fatal(err)
	}
	if len(rep.GlobalAsLocal) != 1 || rep.GlobalAsLocal[0] != "default" || loc.GlobalAsLocal != nil {
		t.Errorf("global_as_local: %q (local rule: %q)", rep.GlobalAsLocal, loc.GlobalAsLocal)
	}
	if rep.Accepted != loc.Accepted || rep.Dropped != loc.Dropped {
		t.Errorf("the global rule replayed as %d/%d, the local one %d/%d", rep.Accepted, rep.Dropped, loc.Accepted, loc.Dropped)
	}
	for _, e := range []string{errA.String(), errB.String()} {
		if !strings.Contains(e, "global rule(s) default replayed as local: a capture holds one host's view") {
			t.Errorf("replay does not say the global rule runs as local: %q", e)
		}
	}
	var sum, errS bytes.Buffer
	if code := run([]string{"replay", "--policy", pol, capture}, &sum, &errS); code != 0 || !strings.Contains(sum.String(), "global rules replayed as local (a capture holds one host's view): default") {
		t.Errorf("summary: %d\n%s", code, sum.String())
	}
	// check prints the [redis] table and the rule's scope.
	var out, errb bytes.Buffer
	if code := run([]string{"check", pol}, &out, &errb); code != 0 {
		t.Fatalf("check: %d %s", code, errb.String())
	}
	for _, want := range []string{"[redis]", `addrs = ["10.0.0.1:7000", "10.0.0.2:7000"]`, "cluster = true", `timeout = "20ms"`, `key-prefix = "packetshaper:"`, `scope = "global"`, "global-slack = 0.1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestOffloadRefusesMetaRules: --offload with a rule that matches on mark,
// interface or queue is a usage error (the kernel offloads by 5-tuple
// alone).
func TestOffloadRefusesMetaRules(t *testing.T) {
	pol := writeFile(t, "meta.toml", "[[rule]]\nname = \"marked\"\nmatch = { mark = \"0x1/0x1\" }\naction = \"accept\"\n\n[[rule]]\nname = \"rest\"\npps = 10\n")
	var out, errb bytes.Buffer
	code := run([]string{"--policy", pol, "--offload"}, &out, &errb)
	if msg := errb.String(); code != 2 || !strings.Contains(msg, `--offload: rule "marked" matches on mark`) || strings.Count(msg, "\n") != 1 {
		t.Errorf("--offload with a mark rule: %d, %q", code, msg)
	}
}

// TestOffloadRefusesFastpath: --offload with --fastpath is a usage error of
// one line, before anything is opened: where the fast path runs it holds its
// rules' flows in the kernel itself (docs/architecture.md's decision).
func TestOffloadRefusesFastpath(t *testing.T) {
	pol := writeFile(t, "p.toml", "[[rule]]\nname = \"rest\"\npps = 10\n")
	var out, errb bytes.Buffer
	code := run([]string{"--policy", pol, "--offload", "--fastpath", "lo"}, &out, &errb)
	if msg := errb.String(); code != 2 || !strings.Contains(msg, "--offload: not with the fast path") || strings.Count(msg, "\n") != 1 {
		t.Errorf("--offload with --fastpath: %d, %q", code, msg)
	}
}

// TestCheck: check prints a good file as understood, every default filled
// in, in a form that parses back to the same policy; a bad file gives
// exit 2 and one line naming the file, line and column.
func TestCheck(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check", testdata + "/policy-mix.toml"}, &out, &errb); code != 0 {
		t.Fatalf("check: %d %s", code, errb.String())
	}
	for _, want := range []string{`name = "dns"`, `algo = "token-bucket"`, `max-flows = 65536`, `mode = "shadow"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	f, err := policy.Parse("check-output", out.Bytes())
	if err != nil {
		t.Fatalf("check's output does not parse back: %v", err)
	}
	orig, err := policy.Load(testdata + "/policy-mix.toml")
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := f.Format(&again); err != nil || again.String() != out.String() {
		t.Errorf("check's output is not a fixed point (err %v):\n%s\nthen\n%s", err, out.String(), again.String())
	}
	if len(f.Rules) != len(orig.Rules) {
		t.Errorf("check output has %d rules, the file %d", len(f.Rules), len(orig.Rules))
	}
	bad := writeFile(t, "bad.toml", "[[rule]]\nname = \"a\"\nmatch = { src = [\"10.0.0.0/33\"] }\npps = 1\n")
	out.Reset()
	errb.Reset()
	code := run([]string{"check", bad}, &out, &errb)
	if msg := errb.String(); code != 2 || !strings.HasPrefix(msg, "packetshaper check: "+bad+":3:") || strings.Count(msg, "\n") != 1 {
		t.Errorf("check of a bad file: %d, %q; want 2 and one line at line 3", code, msg)
	}
	if code := run([]string{"check"}, &out, &errb); code != 2 {
		t.Errorf("check without a file: %d, want 2", code)
	}
}

// TestPolicyMixRules replays testdata/policy-mix.pcapng through
// testdata/policy-mix.toml and checks each rule's counts against what the
// rule says, computed here from the capture independently of the engine:
// the allowlist passes all its packets, the interface rule drops all of
// eth1's, the DNS rule gives its /24 one bucket of burst 2 at 10/s, the
// shadow rule accepts everything and counts what a bucket of 5/s would drop,
// the catch-all gives each flow 20 per aligned second; and ports hidden by
// fragmentation never reach the allowlist.
func TestPolicyMixRules(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"replay", "--json", "--policy", testdata + "/policy-mix.toml", testdata + "/policy-mix.pcapng"}, &out, &errb); code != 0 {
		t.Fatalf("replay: %d %s", code, errb.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]jsonRule{}
	for _, r := range rep.Rules {
		got[r.Name] = r
	}
	// Classify the capture by hand.
	f := testutil.Must(os.Open(testdata + "/policy-mix.pcapng"))(t)
	defer f.Close()
	rd := testutil.Must(replay.NewReader(f))(t)
	type counts struct{ packets, accepted float64 }
	want := map[string]*counts{"mgmt": {}, "lab": {}, "dns": {}, "web-trial": {}, "rest": {}}
	var shadow float64
	dnsBucket := newTestBucket(10, 2)
	webBuckets := map[string]*testBucket{}
	restWindows := map[string]float64{}
	for {
		data, ci, lt, err := rd.Next()
		if err != nil {
			break
		}
		ip, _ := replay.Decap(lt, data)
		now := replay.Nanos(&ci)
		v6 := ip[0]>>4 == 6
		var src string
		var proto byte
		var l4 []byte
		frag := false
		if v6 {
			src, proto, l4 = net.IP(ip[8:24]).String(), ip[6], ip[40:]
		} else {
			src, proto, l4 = net.IP(ip[12:16]).String(), ip[9], ip[20:]
			frag = ip[6]&0x1f != 0 || ip[7] != 0
		}
		dport := -1
		if !frag {
			dport = int(l4[2])<<8 | int(l4[3])
		}
		mgmtSrc := strings.HasPrefix(src, "10.9.") || strings.HasPrefix(src, "fd00:9:")
		switch {
		case mgmtSrc && proto == 6 && (dport == 22 || dport >= 8000 && dport <= 8100):
			want["mgmt"].packets++
			want["mgmt"].accepted++
		case ci.InterfaceIndex == 1:
			want["lab"].packets++
		case proto == 17 && dport == 53:
			want["dns"].packets++
			if dnsBucket.allow(now) {
				want["dns"].accepted++
			}
		case proto == 6 && (dport == 80 || dport == 443 || frag): // hidden ports: limit rules match
			want["web-trial"].packets++
			want["web-trial"].accepted++
			key := fmt.Sprint(src, dport)
			if webBuckets[key] == nil {
				webBuckets[key] = newTestBucket(5, 5)
			}
			if !webBuckets[key].allow(now) {
				shadow++
			}
		default:
			want["rest"].packets++
			w := fmt.Sprint(src, l4[0:2], now/1e9)
			if restWindows[w] < 20 {
				restWindows[w]++
				want["rest"].accepted++
			}
		}
	}
	for name, w := range want {
		g := got[name]
		if float64(g.Packets) != w.packets || float64(g.Accepted) != w.accepted || g.Dropped != g.Packets-g.Accepted {
			t.Errorf("rule %s: %+v; want packets %.0f accepted %.0f", name, g, w.packets, w.accepted)
		}
	}
	if w := want["lab"].packets; w == 0 || want["mgmt"].packets == 0 || shadow == 0 {
		t.Fatalf("the capture lacks a class: %+v shadow %v", want, shadow)
	}
	if g := got["web-trial"].ShadowDropped; float64(g) != shadow {
		t.Errorf("web-trial shadow_dropped %d, want %.0f", g, shadow)
	}
	if rep.NoPorts == 0 || rep.Unmatched != 0 {
		t.Errorf("no_ports %d (want > 0: the fragments), unmatched %d (want 0)", rep.NoPorts, rep.Unmatched)
	}
	for _, pf := range rep.PerFlow {
		if pf.Rule == "" {
			t.Errorf("per_flow entry without a rule: %+v", pf)
		}
	}
}

// testBucket is an ideal token bucket, full at its first packet.
type testBucket struct {
	rate, burst, tokens float64
	last                int64
	started             bool
}

func newTestBucket(rate, burst float64) *testBucket { return &testBucket{rate: rate, burst: burst} }

func (b *testBucket) allow(ns int64) bool {
	if !b.started {
		b.tokens, b.last, b.started = b.burst, ns, true
	}
	b.tokens = min(b.burst, b.tokens+b.rate*float64(ns-b.last)/1e9)
	b.last = ns
	if b.tokens >= 1-1e-9 {
		b.tokens--
		return true
	}
	return false
}

// waitLog waits up to 5 s for the log to contain n lines with substring.
func waitLog(log *testutil.SyncBuffer, substring string, n int) error {
	for i := 0; i < 250; i++ {
		if strings.Count(log.String(), substring) >= n {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no %q in the log after 5 s", substring)
}

// netnsUDP puts the calling goroutine's thread (locked for good) in a new
// network namespace where UDP to 127.0.0.1:9000 goes to NFQUEUE queue,
// and returns a receiver counting what arrives per source address (by its
// last byte) and the namespace's fd for other goroutines to join.
func netnsUDP(t *testing.T, queue int) (received *[256]atomic.Int64, nsFd int) {
	nsFd = enterTestNetns(t, "--queue-num", strconv.Itoa(queue))
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	received = new([256]atomic.Int64)
	testutil.Receive(rx, func(from net.Addr, _ []byte) { received[from.(*net.UDPAddr).IP.To4()[3]].Add(1) })
	return received, nsFd
}

// queueCounts reads the counters of queue q from the control socket sock.
func queueCounts(sock string, q uint16) (control.Queue, error) {
	st, err := control.GetStatus(sock)
	if err != nil {
		return control.Queue{}, err
	}
	for _, c := range st.Queues {
		if c.Queue == q {
			return c, nil
		}
	}
	return control.Queue{}, fmt.Errorf("status lists no queue %d: %+v", q, st.Queues)
}

// settle waits, up to 10 s, until the shaper on queue q (control socket
// sock) has decided sent packets more than it had at before, the kernel
// holds none of them, and received() (what the receiver counted since
// before) has reached what the shaper accepted since before: every packet
// sent has had its verdict and every accepted one has arrived. It returns
// the queue's counters then. A fixed sleep stood here: under load it was
// too short, and the receiver's count then too low.
func settle(sock string, q uint16, before control.Queue, sent uint64, received func() int64) (control.Queue, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := queueCounts(sock, q)
		if err != nil {
			return c, err
		}
		accepted := int64(c.Accepted - before.Accepted)
		if c.Packets-before.Packets >= sent && c.Queued == 0 && received() >= accepted {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("not settled after 10 s: queue %d decided %d of the %d packets sent (%d waiting in the kernel), accepted %d, the receiver counted %d",
				q, c.Packets-before.Packets, sent, c.Queued, accepted, received())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runLiveDriven runs runLive(args) on the calling goroutine (in the
// namespace) while drive runs on another goroutine in the same namespace,
// once the queue is bound; after drive, runLive gets SIGTERM. drive gets
// the log and runLive's control socket. It returns runLive's exit status
// and log.
func runLiveDriven(t *testing.T, nsFd int, args []string, drive func(log *testutil.SyncBuffer, sock string) error) (int, string) {
	log := &testutil.SyncBuffer{}
	// A control socket of its own, not one under /run.
	sock := filepath.Join(t.TempDir(), "ps.sock")
	driverErr := make(chan error, 1)
	go func() {
		driverErr <- testutil.DoFd(nsFd, func() error {
			// "shaping" is logged once the queues are bound; SIGHUP and
			// SIGTERM are caught from before that.
			err := waitLog(log, `msg=shaping`, 1)
			if err == nil {
				err = drive(log, sock)
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
			return err
		})
	}()
	// Whatever goes wrong, runLive gets a SIGTERM after 30 s.
	var running atomic.Bool
	running.Store(true)
	watchdog := time.AfterFunc(30*time.Second, func() {
		if running.Load() {
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}
	})
	defer watchdog.Stop()
	args = append(args[:len(args):len(args)], "--control-socket", sock)
	code := runLiveArgs(args, io.Discard, log)
	running.Store(false)
	if err := <-driverErr; err != nil {
		t.Fatalf("driver: %v\nlog:\n%s", err, log.String())
	}
	return code, log.String()
}

// TestReloadInNetns: SIGHUP with the same rule file keeps every flow's
// state (no fresh burst) through a real queue; a changed rule starts afresh
// with its new burst; a bad file then logs one error naming the file, line
// and column and keeps the previous policy and the flows' state.
func TestReloadInNetns(t *testing.T) {
	received, nsFd := netnsUDP(t, 5)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	write := func(s string) error { return os.WriteFile(pol, []byte(s), 0o644) }
	rule := func(burst int) string {
		return fmt.Sprintf("[[rule]]\nname = \"r\"\npps = 0.001\nburst = %d\n", burst)
	}
	if err := write(rule(5)); err != nil {
		t.Fatal(err)
	}
	const perFlow = 30
	var sock string // runLive's control socket
	// send sends perFlow packets from each of 127.0.0.first..+n-1 port
	// 40000 (round robin) and waits until every one has had its verdict
	// and every accepted one has arrived (settle); it returns what arrived
	// per source.
	send := func(first, n int) ([]int64, error) {
		q0, err := queueCounts(sock, 5)
		if err != nil {
			return nil, err
		}
		before := make([]int64, n)
		var txs []*net.UDPConn
		for i := 0; i < n; i++ {
			before[i] = received[first+i].Load()
			// A fixed source port: the same 5-tuple, the same flow, every time.
			tx, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, byte(first+i)), Port: 40000}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
			if err != nil {
				return nil, err
			}
			defer tx.Close()
			txs = append(txs, tx)
		}
		for i := 0; i < perFlow; i++ {
			for _, tx := range txs {
				if _, err := tx.Write([]byte("x")); err != nil {
					return nil, err
				}
			}
		}
		arrived := func() int64 {
			var sum int64
			for i := range before {
				sum += received[first+i].Load() - before[i]
			}
			return sum
		}
		if _, err := settle(sock, 5, q0, uint64(n*perFlow), arrived); err != nil {
			return nil, err
		}
		got := make([]int64, n)
		for i := range got {
			got[i] = received[first+i].Load() - before[i]
		}
		return got, nil
	}
	check := func(phase string, got []int64, want int64) error {
		for i, g := range got {
			if g != want {
				return fmt.Errorf("%s: flow %d received %d of %d packets, want %d (all: %v)", phase, i, g, perFlow, want, got)
			}
		}
		return nil
	}
	code, log := runLiveDriven(t, nsFd, []string{"--queue", "5", "--policy", pol, "--stats-interval", "0"}, func(log *testutil.SyncBuffer, ctl string) error {
		sock = ctl
		// Each step writes the policy anew (write, when given), reloads it
		// and waits for the nth line with hup (when given), then sends from
		// 4 flows (127.0.0.first up) and checks that each got want.
		for _, st := range []struct {
			write, hup string
			n          int
			phase      string
			first      int
			want       int64
		}{
			{"", "", 0, "burst 5", 10, 5},
			// The same file: the flows keep their empty buckets.
			{"", "kept_state=r\n", 1, "after an unchanged reload", 10, 0},
			// A changed rule: fresh flows with burst 20.
			{rule(20), "msg=reloaded", 2, "after reload to burst 20", 10, 20},
			// A bad rule: old flows keep their empty buckets, new flows
			// get burst 20, not 50.
			{rule(50) + "algo = \"leaky\"\n", `level=ERROR`, 1, "old flows after a bad reload", 10, 0},
			{"", "", 0, "new flows after a bad reload", 20, 20},
		} {
			if st.write != "" {
				if err := write(st.write); err != nil {
					return err
				}
			}
			if st.hup != "" {
				syscall.Kill(os.Getpid(), syscall.SIGHUP)
				if err := waitLog(log, st.hup, st.n); err != nil {
					return err
				}
			}
			got, err := send(st.first, 4)
			if err != nil {
				return err
			}
			if err := check(st.phase, got, st.want); err != nil {
				return err
			}
		}
		return nil
	})
	if code != 0 {
		t.Fatalf("runLive = %d, want 0\nlog:\n%s", code, log)
	}
	if n := strings.Count(log, "msg=reloaded"); n != 2 {
		t.Errorf("%d reloaded lines, want 2:\n%s", n, log)
	}
	if !strings.Contains(log, "kept_state=\"\"") && !strings.Contains(log, "kept_state=\n") {
		t.Errorf("the changing reload should keep no rule's state:\n%s", log)
	}
	var errLine string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errLine = l
		}
	}
	if !strings.Contains(errLine, pol+":5:") || !strings.Contains(errLine, "leaky") || !strings.Contains(errLine, "keeping the previous policy") {
		t.Errorf("the bad reload's log line does not name the file, the line and the problem: %q", errLine)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	last := lines[len(lines)-1]
	got := map[string]int64{}
	for _, m := range statRe.FindAllStringSubmatch(last, -1) {
		got[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	// 4 flows × 4 rounds + 4 new flows; accepted 5 + 0 + 20 + 0 per old
	// flow, 20 per new one; the table holds all 8.
	const packets, accepted = 5 * 4 * perFlow, 4*(5+0+20+0) + 4*20
	want := map[string]int64{"packets": packets, "accepted": accepted, "dropped": packets - accepted, "flows": 8}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("final stats %s = %d, want %d\n%s", k, got[k], v, last)
		}
	}
}

// TestSIGHUPWithoutPolicy: without --policy, SIGHUP is logged and the
// shaper goes on (it would otherwise kill the process: here, the test).
func TestSIGHUPWithoutPolicy(t *testing.T) {
	received, nsFd := netnsUDP(t, 6)
	code, log := runLiveDriven(t, nsFd, []string{"--queue", "6", "--pps", "0.001", "--burst", "2", "--stats-interval", "0"}, func(log *testutil.SyncBuffer, sock string) error {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if err := waitLog(log, "nothing to reload", 1); err != nil {
			return err
		}
		q0, err := queueCounts(sock, 6)
		if err != nil {
			return err
		}
		tx, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 30)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
		if err != nil {
			return err
		}
		defer tx.Close()
		for i := 0; i < 10; i++ {
			if _, err := tx.Write([]byte("x")); err != nil {
				return err
			}
		}
		if _, err := settle(sock, 6, q0, 10, received[30].Load); err != nil {
			return err
		}
		if n := received[30].Load(); n != 2 {
			return fmt.Errorf("after SIGHUP: received %d of 10, want 2 (burst 2: still shaping)", n)
		}
		return nil
	})
	if code != 0 {
		t.Fatalf("runLive = %d, want 0\nlog:\n%s", code, log)
	}
	if !strings.Contains(log, "level=WARN") || strings.Contains(log, "msg=reloaded") {
		t.Errorf("log:\n%s", log)
	}
}
