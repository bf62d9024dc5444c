package daemon

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections accepted and not yet closed, and
// the most at once.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// TestMetricsServerBounded: connections that stay idle (never sending a
// request) are never more than metricsMaxConns at once on the server side,
// however many are opened, and a scrape behind them is answered.
func TestMetricsServerBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := serveMetrics(cl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "up 1\n")
	}))
	defer srv.Close()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 4 * metricsMaxConns {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape behind %d idle connections: %v", len(idle), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "up 1\n" {
		t.Errorf("scrape: %s %q", resp.Status, body)
	}
	if p := cl.peak.Load(); p > metricsMaxConns {
		t.Errorf("%d connections open at once on the server, want at most %d", p, metricsMaxConns)
	}
	if srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 {
		t.Errorf("server timeouts: read %v, write %v, idle %v, header %v; want all set", srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.ReadHeaderTimeout)
	}
}
