package daemon

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testcerts"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestGlobalsTLS: a [redis] table with tls = true, its CA and a client
// certificate connects packetshaper's client to a redis-server that takes
// TLS only with a client certificate: the global rule gets leases. With
// another CA the rule falls back and the log says why.
func TestGlobalsTLS(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.Write(t, dir, "")
	other := testcerts.Write(t, dir, "other-")
	_, addr := testutil.StartRedisTLS(t, certs)
	text := func(ca string) string {
		return fmt.Sprintf("[redis]\naddrs = [%q]\ntimeout = \"200ms\"\ntls = true\nca-file = %q\ncert-file = %q\nkey-file = %q\n", addr, ca, certs.ClientCert, certs.ClientKey) +
			rule("g", "", "pps = 1000", `scope = "global"`)
	}
	for _, tc := range []struct {
		name string
		ca   string
		ok   bool
	}{{"its CA", certs.CA, true}, {"another CA", other.CA, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var log testutil.SyncBuffer
			gl := newGlobals(slog.New(slog.NewTextHandler(&log, nil)))
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
