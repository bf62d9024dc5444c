package daemon

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/nfq"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

func goVersion() string { return runtime.Version() }

// compile parses and compiles a policy file's text (no options), failing
// t on an error: the daemon tests' one way to a policy.
func compile(t testing.TB, text string) *policy.Compiled {
	t.Helper()
	var c *policy.Compiled
	f, err := policy.Parse("p.toml", []byte(text))
	if err == nil {
		c, err = f.Compile(policy.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeFile writes a file of data, mode perm, in t's temporary directory
// dir and returns its path.
func writeFile(t testing.TB, dir, name, data string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// rule is a rule of a policy file: name, matching what match says (the
// keys of an inline table; "" for every packet), then its settings, one a
// line ("pps = 10"): the daemon tests' one way to write a rule.
func rule(name, match string, settings ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[rule]]\nname = %q\n", name)
	if match != "" {
		fmt.Fprintf(&b, "match = { %s }\n", match)
	}
	for _, s := range settings {
		b.WriteString(s + "\n")
	}
	return b.String()
}

// udpSport is a rule's match of UDP from source port p; udpDport, to
// destination port p.
func udpSport(p int) string { return fmt.Sprintf(`sport = ["%d"], proto = ["udp"]`, p) }
func udpDport(p int) string { return fmt.Sprintf(`proto = ["udp"], dport = ["%d"]`, p) }

// acceptRest is a policy's last rule, accepting what the others did not
// match.
var acceptRest = rule("rest", "", `action = "accept"`)

// compilePolicy is compile's policy for the engine.
func compilePolicy(t testing.TB, text string) shaper.Policy {
	t.Helper()
	return compile(t, text).Policy()
}

// newTestEngine is the engine of the policy text serving queues, each over
// a fake queue (woken all together): the daemon tests' one way to an
// engine of a policy.
func newTestEngine(t testing.TB, text string, queues ...uint16) (*shared, []*fakeQueue) {
	t.Helper()
	eng, err := shaper.NewPolicy(compilePolicy(t, text))
	if err != nil {
		t.Fatal(err)
	}
	sh := newEngine(queues, eng)
	fqs := make([]*fakeQueue, len(sh.ws))
	for i, w := range sh.ws {
		fqs[i] = &fakeQueue{}
		w.q = fqs[i]
	}
	sh.wake = func() {
		for _, fq := range fqs {
			fq.Wake()
		}
	}
	return sh, fqs
}

// newWorker returns the worker of one queue, the only one of engine eng.
func newWorker(queue uint16, eng *shaper.Engine) *worker {
	return newEngine([]uint16{queue}, eng).ws[0]
}

// newTestWorker is the worker of queue 0, the only one of an engine of
// the policy text (newTestEngine).
func newTestWorker(t testing.TB, text string) *worker {
	t.Helper()
	sh, _ := newTestEngine(t, text, 0)
	return sh.ws[0]
}

// decideAllocs is the allocations per run of w deciding batch into v,
// runs times, each step ns after the last: *now, which it advances.
func decideAllocs(runs int, w *worker, batch []nfq.Packet, v []nfq.Verdict, now *int64, step int64) float64 {
	return testing.AllocsPerRun(runs, func() {
		*now += step
		clear(v)
		w.decide(batch, v, *now)
	})
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
