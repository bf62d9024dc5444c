package testutil

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testcerts"
)

// The Redis helpers run real redis-server processes (the Debian package,
// which scripts/test.sh installs; they install nothing) on loopback ports
// of their own, without persistence, and stop them when the test ends.

// NeedRedis skips t when redis-server or redis-cli is not installed, except
// as root (CI), where it fails: CI must run these tests.
func NeedRedis(t testing.TB) {
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Redis is a redis-server process of a test.
type Redis struct {
	t    testing.TB
	Port int      // its loopback port
	Dir  string   // its working directory, a temporary one of the test
	Args []string // added to its command line by Start
	log  SyncBuffer
	cmd  *exec.Cmd
	done chan struct{}
}

// NewRedis prepares a redis-server on a free loopback port with the extra
// arguments args, without starting it (Start does), and registers its
// stop with t.Cleanup (which shows its log when the test failed).
func NewRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	NeedRedis(t)
	r := &Redis{t: t, Port: FreePort(t), Dir: t.TempDir(), Args: args}
	t.Cleanup(r.cleanup)
	return r
}

// StartRedis starts a redis-server on a free loopback port, without
// persistence, with the extra arguments args, waits until it answers, and
// registers its stop with t.Cleanup.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	r := NewRedis(t, args...)
	r.Start()
	return r
}

// StartRedisTLS starts a redis-server that also listens with TLS (Debian's
// is built with it) on a port of its own, with c's server certificate,
// asking clients for a certificate of c's CA; it returns the server and
// the TLS address.
func StartRedisTLS(t testing.TB, c testcerts.Files, args ...string) (*Redis, string) {
	t.Helper()
	port := FreePort(t)
	r := StartRedis(t, append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey,
		"--tls-ca-cert-file", c.CA, "--tls-auth-clients", "yes"}, args...)...)
	return r, "127.0.0.1:" + strconv.Itoa(port)
}

// Addr is the server's plain-text address, 127.0.0.1:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Start starts the server (again, after Kill) and waits, up to 10 s, until
// it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.Dir, "--daemonize", "no", "--loglevel", "warning"}, r.Args...)
	r.cmd = exec.Command("redis-server", args...)
	// Its log is shown only when the test fails.
	r.cmd.Stdout, r.cmd.Stderr = &r.log, &r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(r.cmd, r.done)
	var out []byte
	if !WaitFor(r.t, 10*time.Second, func() bool {
		var err error
		out, err = exec.Command("redis-cli", "-p", strconv.Itoa(r.Port), "ping").CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "PONG"
	}) {
		r.t.Fatalf("redis-server on port %d does not answer: %s", r.Port, out)
	}
}

func (r *Redis) cleanup() {
	r.Kill()
	if r.t.Failed() {
		r.t.Logf("redis-server :%d log:\n%s", r.Port, r.log.String())
	}
}

// Kill stops the server at once (SIGKILL), if it runs, and waits for it.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Signal sends sig to the server.
func (r *Redis) Signal(sig syscall.Signal) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
}

// Cli runs redis-cli against the server and returns its trimmed output.
func (r *Redis) Cli(args ...string) string {
	r.t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(r.Port)}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("redis-cli %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Info reads a numeric field of INFO all (such as total_commands_processed).
func (r *Redis) Info(field string) int64 {
	r.t.Helper()
	for _, l := range strings.Split(r.Cli("info", "all"), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == field {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	r.t.Fatalf("no %s in INFO", field)
	return 0
}
