package global

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests run real redis-server processes (the Debian package, which
// scripts/test.sh installs) on loopback ports of their own, and stop them
// when they end.

// needRedis skips t when redis-server is not installed, except as root
// (CI), where it fails: CI must run these tests.
func needRedis(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("%s not found: apt-get install redis-server redis-tools (scripts/test.sh does)", tool)
			}
			t.Skipf("%s not found (apt-get install redis-server redis-tools; scripts/test.sh does as root)", tool)
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// server is a redis-server process of a test.
type server struct {
	t    testing.TB
	log  syncBuf
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// startRedis starts a redis-server on a free loopback port, without
// persistence, and registers its stop with t.Cleanup.
func startRedis(t testing.TB, extra ...string) *server {
	t.Helper()
	needRedis(t)
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), args: extra}
	s.start()
	t.Cleanup(s.cleanup)
	return s
}

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--loglevel", "warning"}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	// Its log is shown only when the test fails.
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(s.port), "ping").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not answer: %s", s.port, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) cleanup() {
	s.kill()
	if s.t.Failed() {
		s.t.Logf("redis-server :%d log:\n%s", s.port, s.log.String())
	}
}

// kill stops the server at once (SIGKILL), if it runs.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// signal sends sig to the server.
func (s *server) signal(sig syscall.Signal) {
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// cli runs redis-cli against the server and returns its output.
func (s *server) cli(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(s.port)}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("redis-cli %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// info reads a field of INFO (such as total_commands_processed).
func (s *server) info(field string) int64 {
	s.t.Helper()
	for _, l := range strings.Split(s.cli("info", "all"), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == field {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	s.t.Fatalf("no %s in INFO", field)
	return 0
}

// cpuSeconds is the CPU time the server has used (INFO cpu).
func (s *server) cpuSeconds() float64 {
	s.t.Helper()
	var sum float64
	for _, l := range strings.Split(s.cli("info", "cpu"), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, _ := strconv.ParseFloat(v, 64)
			sum += x
		}
	}
	return sum
}

// clientCommands is how many commands clients sent the server (by its
// commandstats): EVALSHA, EVAL, SCRIPT, PING, not the calls the scripts
// make inside (which INFO's total_commands_processed counts too) nor the
// test's own INFO.
func (s *server) clientCommands() int64 {
	s.t.Helper()
	var n int64
	for _, l := range strings.Split(s.cli("info", "commandstats"), "\n") {
		for _, c := range []string{"evalsha", "eval", "script|load", "script", "ping"} {
			p := "cmdstat_" + c + ":calls="
			if strings.HasPrefix(l, p) {
				v, _, _ := strings.Cut(strings.TrimPrefix(l, p), ",")
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// startCluster starts three redis-servers in cluster mode and joins them
// into a Redis Cluster of three masters (redis-cli --cluster create),
// waiting until every node reports cluster_state:ok.
func startCluster(t testing.TB) []*server {
	t.Helper()
	needRedis(t)
	var nodes []*server
	var addrs []string
	for range 3 {
		s := &server{t: t, port: freePort(t), dir: t.TempDir()}
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000"}
		s.start()
		t.Cleanup(s.cleanup)
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
		for !strings.Contains(n.cli("cluster", "info"), "cluster_state:ok") {
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok on %s:\n%s", n.addr(), n.cli("cluster", "info"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// rawClient is a plain go-redis client for the script tests.
func rawClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// runScript runs the lease script once.
func runScript(t testing.TB, c redis.Scripter, key string, a askArgs) reply {
	t.Helper()
	v, err := script.Run(context.Background(), c, []string{key}, a.argv()...).Result()
	if err != nil {
		t.Fatalf("lease script: %v", err)
	}
	r, err := parseReply(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fmtReply(r reply) string {
	return fmt.Sprintf("{granted %d hosts %d cap %d wait %dµs left %dµs own %.1f total %.1f}", r.granted, r.hosts, r.cap, r.waitUs, r.leftUs, r.own, r.total)
}

// syncBuf is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
