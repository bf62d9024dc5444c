package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/shaper"
)

// loadWith parses args as the live command line would and loads the
// configuration with file's contents as the --config file ("" for none).
func loadWith(t *testing.T, contents string, args ...string) (engineConfig, []any, string, error) {
	t.Helper()
	path := ""
	if contents != "" {
		path = filepath.Join(t.TempDir(), "limits.conf")
		if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addLimiterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	cfg, attrs, err := newConfigSource(fs, path).load()
	return cfg, attrs, path, err
}

// flagsConfig is the configuration the command line args give alone.
func flagsConfig(t *testing.T, args ...string) engineConfig {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	lf := addLimiterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	c, err := lf.config()
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return c
}

// TestConfigFile: a file gives exactly the configuration the same settings
// give as flags, in every spelling the format allows.
func TestConfigFile(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string // the same settings as flags
	}{
		{"one setting", "pps 100\n", []string{"--pps", "100"}},
		{"every setting", `
# every limiter setting, in both forms
bitrate    10mbit
burst=20000
algo sliding-window-counter
window = 250ms
key=src-dst
src-prefix4 24
dst-prefix4 24
src-prefix6 64
dst-prefix6 64
symmetric true
max-flows 1000
flow-timeout 30s
malformed drop
`, []string{"--bitrate", "10mbit", "--burst", "20000", "--algo", "sliding-window-counter", "--window", "250ms",
			"--key", "src-dst", "--src-prefix4", "24", "--dst-prefix4", "24", "--src-prefix6", "64", "--dst-prefix6", "64",
			"--symmetric", "--max-flows", "1000", "--flow-timeout", "30s", "--malformed", "drop"}},
		{"comments, blanks, tabs, CRLF, bare boolean",
			"  # header\r\n\r\n\tpps\t0.5   # five per 10 s\r\nwindow=10s#no space\r\nalgo fixed-window\r\nsymmetric\r\n",
			[]string{"--pps", "0.5", "--window", "10s", "--algo", "fixed-window", "--symmetric"}},
		{"no newline at the end", "pps 7", []string{"--pps", "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, attrs, _, err := loadWith(t, tc.file)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if want := flagsConfig(t, tc.args...); !reflect.DeepEqual(got, want) {
				t.Errorf("file gives\n%+v\nflags give\n%+v", got, want)
			}
			if len(attrs) == 0 || len(attrs)%2 != 0 {
				t.Errorf("settings for the log: %v", attrs)
			}
		})
	}
}

// TestConfigFileErrors: a bad file is one line naming the file, the line
// and the problem.
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		args []string
		line int    // 0: the file as a whole
		want string // in the message
	}{
		{"pps 10\nqueue 3\n", nil, 2, `unknown setting "queue"`},
		{"pps 10\n\n# c\nppps 3\n", nil, 4, `unknown setting "ppps"`},
		{"--pps 10\n", nil, 1, "without dashes"},
		{"burst 3\npps abc\n", nil, 2, `invalid value "abc" for pps`},
		{"pps 10\nwindow 5\n", nil, 2, `invalid value "5" for window`},
		{"pps 10\nsymmetric maybe\n", nil, 2, `invalid value "maybe" for symmetric`},
		{"pps 10\nmax-flows 1e3\n", nil, 2, `invalid value "1e3" for max-flows`},
		{"pps 10\nburst\n", nil, 2, "burst needs a value"},
		{"pps 10 20\n", nil, 1, `takes one value`},
		{"pps 10\nkey src\npps 20\n", nil, 3, "already set on line 1"},
		// Values the flag parses but config() refuses: still placed on
		// their line.
		{"# rate\npps -3\n", nil, 2, "pps must be a positive number"},
		{"pps 10\nalgo leaky\n", nil, 2, `unknown algorithm "leaky"`},
		{"pps 10\nsrc-prefix4 33\n", nil, 2, "src-prefix4 must be between 1 and 32"},
		{"pps 10\nbitrate 1mbit\n", nil, 1, "pps and --bitrate are exclusive"},
		// What no single line causes names the file.
		{"burst 4\n", nil, 0, "no limit given"},
		{"bitrate 1mbit\nalgo sliding-window\n", nil, 0, "sliding-window counts packets"},
	} {
		_, _, path, err := loadWith(t, tc.file, tc.args...)
		if err == nil {
			t.Errorf("%q: no error", tc.file)
			continue
		}
		msg := err.Error()
		prefix := path + ": "
		if tc.line > 0 {
			prefix = fmt.Sprintf("%s:%d: ", path, tc.line)
		}
		if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%q: error %q; want one line starting %q, mentioning %q", tc.file, msg, prefix, tc.want)
		}
	}
}

// TestConfigPrecedence: flags on the command line override the file.
func TestConfigPrecedence(t *testing.T) {
	file := "pps 100\nburst 20\nkey src\n"
	for _, tc := range []struct {
		args []string
		want []string // the flags alone that give the same configuration
	}{
		{nil, []string{"--pps", "100", "--burst", "20", "--key", "src"}},
		{[]string{"--burst", "3"}, []string{"--pps", "100", "--burst", "3", "--key", "src"}},
		{[]string{"--pps", "7", "--key", "dst"}, []string{"--pps", "7", "--burst", "20", "--key", "dst"}},
		// --bitrate on the command line replaces the file's pps.
		{[]string{"--bitrate", "1mbit", "--burst", "100000"}, []string{"--bitrate", "1mbit", "--burst", "100000", "--key", "src"}},
		{[]string{"--window", "1m30s", "--symmetric"}, []string{"--pps", "100", "--burst", "20", "--key", "src", "--window", "90s", "--symmetric"}},
	} {
		got, _, _, err := loadWith(t, file, tc.args...)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if want := flagsConfig(t, tc.want...); !reflect.DeepEqual(got, want) {
			t.Errorf("file %q with %q:\n%+v\nwant\n%+v", file, tc.args, got, want)
		}
	}
	// A bad command-line value is the flag's error, not the file's.
	_, _, _, err := loadWith(t, file, "--burst", "0.5")
	if err == nil || !strings.HasPrefix(err.Error(), "--burst must be at least 1") {
		t.Errorf("--burst 0.5 over a file: %v", err)
	}
	// The file's bad line is hidden by a flag that overrides it.
	if _, _, _, err := loadWith(t, "pps -1\n", "--pps", "5"); err != nil {
		t.Errorf("--pps 5 over pps -1: %v", err)
	}
}

// TestConfigStartupErrors: a bad --config stops both commands at startup
// with exit status 2 and one line.
func TestConfigStartupErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("pps 10\n\nalgo=leaky\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.conf")
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"packetshaper: ", []string{"--config", bad}, bad + ":3: algo: unknown algorithm"},
		{"packetshaper replay: ", []string{"replay", "--config", bad, "x.pcap"}, bad + ":3: algo: unknown algorithm"},
		{"packetshaper: ", []string{"--config", missing}, missing},
		{"packetshaper replay: ", []string{"replay", "--config", missing, "x.pcap"}, missing},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		msg := errb.String()
		if code != 2 || !strings.HasPrefix(msg, tc.cmd) || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.want) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and one line mentioning %q", tc.args, code, msg, tc.want)
		}
	}
}

// TestReplayConfig: replay with --config prints what the same flags print.
func TestReplayConfig(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "limits.conf")
	if err := os.WriteFile(conf, []byte("pps=20\nburst 3\nalgo fixed-window\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const capture = "../../testdata/multiflow.pcap"
	var a, b, errb bytes.Buffer
	if code := run([]string{"replay", "--json", "--config", conf, capture}, &a, &errb); code != 0 {
		t.Fatalf("replay --config: %d %s", code, errb.String())
	}
	if code := run([]string{"replay", "--json", "--pps", "20", "--burst", "3", "--algo", "fixed-window", capture}, &b, &errb); code != 0 {
		t.Fatalf("replay: %d %s", code, errb.String())
	}
	if a.String() != b.String() {
		t.Errorf("replay --config prints\n%s\nthe same flags print\n%s", a.String(), b.String())
	}
	if !strings.Contains(a.String(), `"dropped": `) || strings.Contains(a.String(), `"dropped": 0,`) {
		t.Errorf("the limit should drop packets of this capture:\n%s", a.String())
	}
}

// TestWorkerSwap: a pending engine takes over at the next batch, whose
// packets it decides from fresh flows, and the counters shown go on from
// the old engine's.
func TestWorkerSwap(t *testing.T) {
	newEng := func(burst float64) *shaper.Engine {
		e, err := shaper.New(shaper.Config{Rate: 0.001, Burst: burst, MaxFlows: 2})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	w := &worker{eng: newEng(2)}
	// 3 flows × 4 packets round-robin, table of 2 (each new flow evicts),
	// then a malformed packet.
	batch := func() ([]nfq.Packet, []nfq.Verdict) {
		var b []nfq.Packet
		for i := 0; i < 4; i++ {
			for f := 0; f < 2; f++ {
				d := udp4(uint16(1000 + f))
				b = append(b, nfq.Packet{Data: d, Len: len(d)})
			}
		}
		d := udp4(1002)
		b = append(b, nfq.Packet{Data: d, Len: len(d)}, nfq.Packet{Data: []byte{0x45}, Len: 1})
		return b, make([]nfq.Verdict, len(b))
	}
	drops := func(v []nfq.Verdict) int {
		n := 0
		for _, x := range v {
			if x.Action == nfq.Drop {
				n++
			}
		}
		return n
	}
	now := int64(1e18)
	b, v := batch()
	w.decide(b, v, now)
	// burst 2: flows 1000 and 1001 get 2 of 4 each, 1002 its one, malformed accepted.
	if d := drops(v); d != 4 {
		t.Fatalf("first batch: %d drops, want 4", d)
	}
	w.snapshot(now)
	m0, e0 := w.malformed.Load(), w.evictions.Load()
	if m0 != 1 || e0 != 1 {
		t.Fatalf("after the first batch: malformed %d, evictions %d; want 1, 1", m0, e0)
	}

	// A reload stored while no batch runs: nothing changes until the next.
	next := newEng(3)
	w.pending.Store(next)
	if w.eng == next {
		t.Fatal("engine swapped outside a batch")
	}
	now += int64(time.Millisecond)
	b, v = batch()
	w.decide(b, v, now)
	if w.eng != next || w.pending.Load() != nil {
		t.Fatal("the pending engine did not take over at the batch")
	}
	// Fresh flows with burst 3: 3 of 4 each (under the old engine, whose
	// buckets are empty: 0).
	if d := drops(v); d != 2 {
		t.Errorf("batch after the swap: %d drops, want 2 (fresh flows, burst 3)", d)
	}
	if m, e := w.malformed.Load(), w.evictions.Load(); m != m0+1 || e != e0+1 {
		t.Errorf("after the swap: malformed %d, evictions %d; want %d, %d (the old engine's counts go on)", m, e, m0+1, e0+1)
	}
	if f := w.flows.Load(); f != 2 {
		t.Errorf("flows gauge after the swap = %d, want 2 (the new table's)", f)
	}
	// The swap check costs nothing per batch when there is nothing to swap.
	allocs := testing.AllocsPerRun(50, func() {
		now += int64(time.Millisecond)
		clear(v)
		w.decide(b, v, now)
	})
	if allocs != 0 {
		t.Errorf("decide: %v allocations, want 0", allocs)
	}
}

// syncBuffer is a log destination the test reads while runLive writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitLog waits up to 5 s for the log to contain n lines with substring.
func waitLog(log *syncBuffer, substring string, n int) error {
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
	enterTestNetns(t, "--queue-num", strconv.Itoa(queue))
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	received = new([256]atomic.Int64)
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := rx.ReadFromUDP(buf)
			if err != nil {
				return
			}
			received[from.IP.To4()[3]].Add(1)
		}
	}()
	nsFd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(nsFd) })
	return received, nsFd
}

// runLiveDriven runs runLive(args) on the calling goroutine (in the
// namespace) while drive runs on another goroutine in the same namespace,
// once the queue is bound; after drive, runLive gets SIGTERM. It returns
// runLive's exit status and log.
func runLiveDriven(t *testing.T, nsFd int, args []string, drive func(log *syncBuffer) error) (int, string) {
	log := &syncBuffer{}
	driverErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread joins the namespace
		if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
			driverErr <- err
			return
		}
		// "shaping" is logged once the queues are bound; SIGHUP and
		// SIGTERM are caught from before that.
		err := waitLog(log, `msg=shaping`, 1)
		if err == nil {
			err = drive(log)
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}
		driverErr <- err
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
	code := runLive(args, io.Discard, log)
	running.Store(false)
	if err := <-driverErr; err != nil {
		t.Fatalf("driver: %v\nlog:\n%s", err, log.String())
	}
	return code, log.String()
}

// TestReloadInNetns: after the --config file is rewritten and SIGHUP sent,
// the new limit applies to real traffic through a real queue, with every
// flow starting afresh; a bad file then logs one error and keeps the
// previous limit and the flows' state; the counters add up over both
// engines.
func TestReloadInNetns(t *testing.T) {
	received, nsFd := netnsUDP(t, 5)
	conf := filepath.Join(t.TempDir(), "limits.conf")
	write := func(s string) error { return os.WriteFile(conf, []byte(s), 0o644) }
	if err := write("# phase 1\npps 0.001\nburst 5\n"); err != nil {
		t.Fatal(err)
	}
	const perFlow = 30
	// send sends perFlow packets from each of 127.0.0.first..+n-1 port
	// 40000 (round robin) and waits for the receiver to settle; it returns what arrived
	// per source.
	send := func(first, n int) ([]int64, error) {
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
		time.Sleep(300 * time.Millisecond)
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
	code, log := runLiveDriven(t, nsFd, []string{"--queue", "5", "--config", conf, "--stats-interval", "0"}, func(log *syncBuffer) error {
		got, err := send(10, 4)
		if err != nil {
			return err
		}
		if err := check("burst 5", got, 5); err != nil {
			return err
		}
		if err := write("# phase 2\npps=0.001\nburst=20\n"); err != nil {
			return err
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if err := waitLog(log, `msg=reloaded`, 1); err != nil {
			return err
		}
		// The same flows, fresh in the new engine: 20 each (the old
		// engine, its buckets empty, would pass none).
		if got, err = send(10, 4); err != nil {
			return err
		}
		if err := check("after reload to burst 20", got, 20); err != nil {
			return err
		}
		if err := write("pps 0.001\nburst 50\nalgo leaky-bucket\n"); err != nil {
			return err
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if err := waitLog(log, `level=ERROR`, 1); err != nil {
			return err
		}
		// Old flows keep their empty buckets (no swap happened), new
		// flows get burst 20, not 50.
		if got, err = send(10, 4); err != nil {
			return err
		}
		if err := check("old flows after a bad reload", got, 0); err != nil {
			return err
		}
		if got, err = send(20, 4); err != nil {
			return err
		}
		return check("new flows after a bad reload", got, 20)
	})
	if code != 0 {
		t.Fatalf("runLive = %d, want 0\nlog:\n%s", code, log)
	}
	if n := strings.Count(log, "msg=reloaded"); n != 1 {
		t.Errorf("%d reloaded lines, want 1:\n%s", n, log)
	}
	if !strings.Contains(log, "burst=20") {
		t.Errorf("the reloaded line lacks the new settings:\n%s", log)
	}
	var errLine string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errLine = l
		}
	}
	if !strings.Contains(errLine, conf+":3:") || !strings.Contains(errLine, "leaky-bucket") || !strings.Contains(errLine, "keeping the previous configuration") {
		t.Errorf("the bad reload's log line does not name the file, the line and the problem: %q", errLine)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	last := lines[len(lines)-1]
	got := map[string]int64{}
	for _, m := range statRe.FindAllStringSubmatch(last, -1) {
		got[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	// 4 flows × 3 rounds + 4 new flows; accepted 5 + 20 + 0 per old flow,
	// 20 per new one; the new engine's table holds all 8.
	const packets, accepted = 4 * 4 * perFlow, 4*(5+20+0) + 4*20
	want := map[string]int64{"packets": packets, "accepted": accepted, "dropped": packets - accepted, "flows": 8}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("final stats %s = %d, want %d\n%s", k, got[k], v, last)
		}
	}
}

// TestSIGHUPWithoutConfig: without --config, SIGHUP is logged and the
// shaper goes on (it would otherwise kill the process: here, the test).
func TestSIGHUPWithoutConfig(t *testing.T) {
	received, nsFd := netnsUDP(t, 6)
	code, log := runLiveDriven(t, nsFd, []string{"--queue", "6", "--pps", "0.001", "--burst", "2", "--stats-interval", "0"}, func(log *syncBuffer) error {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if err := waitLog(log, "nothing to reload", 1); err != nil {
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
		time.Sleep(300 * time.Millisecond)
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
