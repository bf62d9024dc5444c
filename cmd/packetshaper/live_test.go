package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/internal/timing"
)

func TestLiveUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "x", "--pps", "10"}, "--queue"},
		{[]string{"--queue", "5-3", "--pps", "10"}, "--queue"},
		{[]string{"--pps", "10", "--copy-range", "10"}, "--copy-range"},
		{[]string{"--pps", "10", "--queue-maxlen", "0"}, "--queue-maxlen"},
		{[]string{"--pps", "10", "--batch", "0"}, "--batch"},
		{[]string{"--pps", "10", "--max-held", "-1"}, "--max-held"},
		{[]string{"--pps", "10", "--queue-maxlen", "100", "--max-held", "51"}, "--max-held must be between 0 and half of --queue-maxlen (50"},
		{[]string{"--pps", "10", "--rt-priority", "100"}, "--rt-priority"},
		{[]string{"--pps", "10", "--log-format", "xml"}, "--log-format"},
		{[]string{"--pps", "10", "--metrics-addr", "nonsense"}, "--metrics-addr"},
		{[]string{"--pps", "10", "--metrics-addr", "9464"}, "want HOST:PORT"},
		{[]string{"--pps", "10", "extra"}, "unexpected argument"},
		{[]string{}, "no limit given"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		msg := errb.String()
		if code != 2 || !strings.HasPrefix(msg, "packetshaper: ") || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.want) {
			t.Errorf("runLive(%q) = %d, stderr %q; want 2 and one line mentioning %q", tc.args, code, msg, tc.want)
		}
	}
}

var statRe = regexp.MustCompile(`(?:^|\s)(packets|accepted|dropped|flows)=(\d+)`)

// TestLiveInNetns runs the live command in this process, in a network
// namespace of its own, against UDP over lo queued by an iptables rule; it
// checks per-flow limiting, the metrics endpoint, and that SIGTERM makes it
// exit 0 with a final stats line that accounts for every packet.
func TestLiveInNetns(t *testing.T) {
	t.Run("one queue", func(t *testing.T) {
		testLive(t, "3", []string{"--queue-num", "3"}, 4)
	})
	// The kernel balances on addresses only: flows from 16 source
	// addresses spread over both queues (all on one: p = 2^-15).
	t.Run("two queues", func(t *testing.T) {
		testLive(t, "3-4", []string{"--queue-balance", "3:4"}, 16)
	})
}

// enterTestNetns moves the calling goroutine, locked to its OS thread for
// good (the thread leaves with the namespace when the test ends), into a new
// network namespace with lo up and an iptables rule sending UDP to port 9000
// on OUTPUT to NFQUEUE with queueArgs ("--queue-num", "3"), with bypass, and
// returns the namespace's fd for other goroutines to join (testutil.DoFd).
// It skips the test when not root.
func enterTestNetns(t *testing.T, queueArgs ...string) (nsFd int) {
	t.Helper()
	testutil.NeedRoot(t, "creates a network namespace and an iptables queue rule")
	nsFd = testutil.Unshare(t)
	testutil.MustRun(t, "iptables", append(append([]string{"-A", "OUTPUT", "-p", "udp", "--dport", "9000", "-j", "NFQUEUE"}, queueArgs...), "--queue-bypass")...)
	return nsFd
}

func testLive(t *testing.T, queues string, rule []string, flows int) {
	// The driver's HTTP client needs the namespace's lo too.
	nsFd := enterTestNetns(t, rule...)
	// Sockets are created here, on the namespace's thread.
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	const perFlow, burst = 50, 5
	var txs []*net.UDPConn
	for i := 0; i < flows; i++ {
		src := &net.UDPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
		tx, err := net.DialUDP("udp4", src, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		txs = append(txs, tx)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for --metrics-addr
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()

	var received atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	var metrics, flowsOut, statusOut string
	sock := filepath.Join(t.TempDir(), "ps.sock")
	driverErr := make(chan error, 1)
	go func() {
		up := false
		defer func() {
			if up { // runLive handles SIGTERM: stop it whatever happened
				syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
		}()
		driverErr <- testutil.DoFd(nsFd, func() error {
			// Wait for the metrics endpoint: the queue is bound and
			// SIGTERM is handled from then on.
			var err error
			if !testutil.WaitFor(t, 2*time.Second, func() bool { _, err = httpGet(metricsAddr, "/metrics"); return err == nil }) {
				return fmt.Errorf("metrics endpoint never came up: %v", err)
			}
			up = true
			for i := 0; i < perFlow; i++ {
				for _, tx := range txs {
					if _, err := tx.Write([]byte("x")); err != nil {
						return err
					}
				}
			}
			time.Sleep(300 * time.Millisecond)
			b, err := httpGet(metricsAddr, "/metrics")
			if err != nil {
				return err
			}
			metrics = string(b)
			// The control socket: the flows, and the status.
			var out, errb bytes.Buffer
			if code := runFlowsArgs([]string{"--control-socket", sock, "--json"}, &out, &errb); code != 0 {
				return fmt.Errorf("packetshaper flows: %d: %s", code, errb.String())
			}
			flowsOut = out.String()
			out.Reset()
			if code := runStatusArgs([]string{"--control-socket", sock, "--json"}, &out, &errb); code != 0 {
				return fmt.Errorf("packetshaper status: %d: %s", code, errb.String())
			}
			statusOut = out.String()
			return nil
		})
	}()
	// Whatever goes wrong, runLive gets a SIGTERM after 20 s.
	var running, fired atomic.Bool
	running.Store(true)
	watchdog := time.AfterFunc(20*time.Second, func() {
		if running.Load() {
			fired.Store(true)
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}
	})
	defer watchdog.Stop()
	var stdout, stderr bytes.Buffer
	t0 := time.Now()
	code := runLiveArgs([]string{"--queue", queues, "--pps", "0.001", "--burst", fmt.Sprint(burst),
		"--metrics-addr", metricsAddr, "--stats-interval", "0", "--control-socket", sock}, &stdout, &stderr)
	running.Store(false)
	if err := <-driverErr; err != nil {
		t.Fatalf("driver: %v\nlog:\n%s", err, stderr.String())
	}
	if code != 0 {
		t.Fatalf("runLive = %d, want 0\nlog:\n%s", code, stderr.String())
	}
	// It ended by itself, not at the watchdog's SIGTERM.
	el := time.Since(t0)
	if fired.Load() {
		t.Errorf("runLive ran %v: it ended at the watchdog's SIGTERM, not by itself", el)
	}
	timing.Check(t, el <= 10*time.Second, "runLive took %v, want at most 10 s", el)
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, `msg="final stats"`) {
		t.Fatalf("last log line is not the final stats:\n%s", stderr.String())
	}
	got := map[string]int64{}
	for _, m := range statRe.FindAllStringSubmatch(last, -1) {
		got[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	want := map[string]int64{"packets": int64(flows * perFlow), "accepted": int64(flows * burst), "dropped": int64(flows * (perFlow - burst)), "flows": int64(flows)}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("final stats %s = %d, want %d\n%s", k, got[k], v, last)
		}
	}
	if r := received.Load(); r != int64(flows*burst) {
		t.Errorf("received %d packets, want %d", r, flows*burst)
	}
	// Per queue: the metrics' packet counts add up, and with two queues
	// both had traffic.
	var total int64
	for _, m := range regexp.MustCompile(`(?m)^packetshaper_packets_total\{queue="(\d+)"\} (\d+)$`).FindAllStringSubmatch(metrics, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		total += n
		if n == 0 {
			t.Errorf("queue %s had no packets:\n%s", m[1], metrics)
		}
	}
	if total != int64(flows*perFlow) {
		t.Errorf("metrics: packets_total over the queues = %d, want %d:\n%s", total, flows*perFlow, metrics)
	}
	if !strings.Contains(metrics, "# TYPE packetshaper_flows gauge") {
		t.Errorf("metrics lack the flows gauge:\n%s", metrics)
	}
	// Every flow listed once, with its counters; the status adds up.
	flowLines := strings.Split(strings.TrimSpace(flowsOut), "\n")
	for _, l := range flowLines {
		var f control.Flow
		if err := json.Unmarshal([]byte(l), &f); err != nil || f.Packets != perFlow || f.Accepted != burst || f.Rule != "default" {
			t.Errorf("flows line %q: %+v, %v; want %d packets, %d accepted", l, f, err, perFlow, burst)
		}
	}
	if len(flowLines) != flows {
		t.Errorf("packetshaper flows listed %d flows, want %d:\n%s", len(flowLines), flows, flowsOut)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(statusOut), &st); err != nil {
		t.Fatalf("packetshaper status --json: %v\n%s", err, statusOut)
	}
	var stPackets uint64
	for _, q := range st.Queues {
		stPackets += q.Packets
		if !q.Bound {
			t.Errorf("status: queue %d not bound", q.Queue)
		}
	}
	if stPackets != uint64(flows*perFlow) || len(st.Rules) != 1 || st.Rules[0].Packets != uint64(flows*perFlow) || st.Policy != "command line" {
		t.Errorf("status: %d packets over the queues, rules %+v; want %d in rule default\n%s", stPackets, st.Rules, flows*perFlow, statusOut)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the control socket is left after the stop: %v", err)
	}
	if strings.Contains(queues, "-") && !strings.Contains(last, "per_queue=3:") {
		t.Errorf("final stats lack per_queue: %s", last)
	}
}

// httpGet is a minimal HTTP/1.0 GET on a connection dialled from the calling
// goroutine's thread (net/http dials from goroutines of its own, which may
// be in another network namespace).
func httpGet(addr, path string) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.0 200")) && !bytes.HasPrefix(b, []byte("HTTP/1.1 200")) {
		return nil, fmt.Errorf("GET %s: %.40q", path, b)
	}
	return b, nil
}
