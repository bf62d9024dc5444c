package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

func goVersion() string { return runtime.Version() }

// compile parses and compiles a policy file's text (no options), failing
// t on an error: the daemon tests' one way to a policy.
func compile(t testing.TB, text string) *policy.Compiled {
	t.Helper()
	f, err := policy.Parse("p.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Compile(policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// compilePolicy is compile's policy for the engine.
func compilePolicy(t testing.TB, text string) shaper.Policy {
	t.Helper()
	return compile(t, text).Policy()
}

func httptestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %v %v", url, resp.Status, err)
	}
	return string(b)
}
