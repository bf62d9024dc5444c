package daemon

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsLandingPage: "/" on the metrics port is a page linking
// /metrics; /metrics is still the metrics; other paths are 404.
func TestMetricsLandingPage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics here\n") })
	srv := serveMetrics(ln, h)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, `href="/metrics"`) {
		t.Errorf("GET /: %d %q, want 200 and a link to /metrics", code, body)
	}
	if code, body := get("/metrics"); code != 200 || body != "metrics here\n" {
		t.Errorf("GET /metrics: %d %q", code, body)
	}
	for _, p := range []string{"/x", "/index.html", "/metrics/x"} {
		if code, _ := get(p); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}
