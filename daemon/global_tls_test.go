package daemon

import (
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testcerts"
)

// lockedBuf is a log buffer safe for the client's goroutine and the test.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startTLSRedis starts a redis-server on loopback that listens with TLS
// on the port it returns (and plain on another, for the check that it
// is up), asking clients for a certificate of certs' CA; it is killed
// when t ends.
func startTLSRedis(t *testing.T, certs testcerts.Files) int {
	t.Helper()
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("%s not found: apt-get install redis-server redis-tools (scripts/test.sh does)", tool)
			}
			t.Skipf("%s not found (apt-get install redis-server redis-tools)", tool)
		}
	}
	port := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	plain, tlsPort := port(), port()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(plain), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certs.ServerCert,
		"--tls-key-file", certs.ServerKey, "--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes")
	var log lockedBuf
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("redis-server log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(plain), "ping").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return tlsPort
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not answer: %s\n%s", out, log.String())
		}
	}
}

// TestGlobalsTLS: a [redis] table with tls = true, its CA and a client
// certificate connects packetshaper's client to a redis-server that takes
// TLS only with a client certificate: the global rule gets leases. With
// another CA the rule falls back and the log says why.
func TestGlobalsTLS(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.Write(t, dir, "")
	other := testcerts.Write(t, dir, "other-")
	port := startTLSRedis(t, certs)
	text := func(ca string) string {
		return "[redis]\naddrs = [\"127.0.0.1:" + strconv.Itoa(port) + "\"]\ntimeout = \"200ms\"\ntls = true\nca-file = \"" + ca +
			"\"\ncert-file = \"" + certs.ClientCert + "\"\nkey-file = \"" + certs.ClientKey + "\"\n" +
			"[[rule]]\nname = \"g\"\npps = 1000\nscope = \"global\"\n"
	}
	for _, tc := range []struct {
		name string
		ca   string
		ok   bool
	}{{"its CA", certs.CA, true}, {"another CA", other.CA, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var log lockedBuf
			gl := newGlobals(slog.New(slog.NewTextHandler(&log, nil)), 1)
			defer gl.close()
			c := compile(t, text(tc.ca))
			p, done, err := gl.prepare(c.Policy(), c)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			k := flows.Key{Family: 4, Mode: flows.Src}
			l := p.Rules[0].Global.Lease(&k)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				l.Take(time.Now().UnixNano(), 1)
				rs, cs, _ := gl.stats()
				st := rs["g"]
				if tc.ok && st.Granted > 0 && !st.Fallback {
					break
				}
				if !tc.ok && st.Fallback {
					if st.Granted != 0 || !strings.Contains(log.String(), "x509: certificate signed by unknown authority") {
						t.Errorf("another CA: %+v, last error %q; log:\n%s", st, cs.LastError, log.String())
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%+v, last error %q; log:\n%s", st, cs.LastError, log.String())
				}
			}
		})
	}
}
