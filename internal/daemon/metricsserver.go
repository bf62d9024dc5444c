package daemon

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// The metrics server's bounds: whatever clients do, it holds at most
// metricsMaxConns connections (file descriptors, goroutines, buffers), and
// none for long unless it is making progress.
const (
	// metricsMaxConns caps the open connections. When the cap is reached,
	// the connection idle longest (connected without a request yet, or
	// kept alive between requests) is closed to make room for the next,
	// so that idle connections, however many, never keep a scrape out.
	metricsMaxConns = 64
	// metricsReadHeaderTimeout bounds the wait for a request's headers,
	// metricsReadTimeout the whole request, metricsWriteTimeout the
	// response (a scrape is rendered in milliseconds), metricsIdleTimeout
	// a kept-alive connection between requests.
	metricsReadHeaderTimeout = 5 * time.Second
	metricsReadTimeout       = 10 * time.Second
	metricsWriteTimeout      = 30 * time.Second
	metricsIdleTimeout       = 30 * time.Second
)

// serveMetrics serves h at /metrics on ln, within the bounds above, until
// the returned server is closed.
func serveMetrics(ln net.Listener, h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	mux.HandleFunc("/{$}", landingPage) // only "/" itself: other paths 404
	idle := &idleConns{since: map[net.Conn]time.Time{}, evicted: map[net.Conn]bool{}}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadHeaderTimeout,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ConnState:         idle.track,
	}
	go srv.Serve(&evictingListener{Listener: netutil.LimitListener(ln, metricsMaxConns), idle: idle, max: metricsMaxConns})
	return srv
}

// landingText is the page at "/": where the metrics are.
const landingText = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>packetshaper</title></head>
<body><h1>packetshaper</h1>
<p>Prometheus metrics: <a href="/metrics">/metrics</a></p>
</body></html>
`

// landingPage serves landingText for GET and HEAD.
func landingPage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, landingText)
}

// idleConns tracks the server's connections: how many are open, and since
// when each idle one (new or kept alive) has been idle.
type idleConns struct {
	mu    sync.Mutex
	open  int
	since map[net.Conn]time.Time
	// evicted are closed by evictOldest and no longer counted in open,
	// until the server reports them closed.
	evicted map[net.Conn]bool
}

// track is the server's ConnState hook.
func (ic *idleConns) track(c net.Conn, s http.ConnState) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	switch s {
	case http.StateNew:
		ic.open++
		ic.since[c] = time.Now()
	case http.StateIdle:
		ic.since[c] = time.Now()
	case http.StateActive:
		delete(ic.since, c)
	case http.StateClosed, http.StateHijacked:
		if ic.evicted[c] {
			delete(ic.evicted, c)
		} else {
			ic.open--
		}
		delete(ic.since, c)
	}
}

// evictOldest closes the connection idle longest if at least max are open.
func (ic *idleConns) evictOldest(max int) {
	ic.mu.Lock()
	if ic.open < max {
		ic.mu.Unlock()
		return
	}
	var oldest net.Conn
	var at time.Time
	for c, t := range ic.since {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	if oldest != nil {
		delete(ic.since, oldest)
		ic.evicted[oldest] = true
		ic.open--
	}
	ic.mu.Unlock()
	if oldest != nil {
		oldest.Close() // frees its slot of the limit at once
	}
}

// evictingListener makes room, before each accept, by closing the
// connection idle longest when the limit is reached; connections that are
// being served are never closed (the timeouts bound them).
type evictingListener struct {
	net.Listener
	idle *idleConns
	max  int
}

func (l *evictingListener) Accept() (net.Conn, error) {
	l.idle.evictOldest(l.max)
	return l.Listener.Accept()
}
