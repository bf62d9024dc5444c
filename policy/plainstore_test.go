package policy

import (
	"strings"
	"testing"
)

// TestPlainStoreWarning: a store not on loopback without TLS is a warning
// (packetshaper check prints it, the live shaper logs it at start); on
// loopback, or with tls = true, none.
func TestPlainStoreWarning(t *testing.T) {
	for _, tc := range []struct {
		redis string
		warn  bool
	}{
		{`addrs = ["127.0.0.1:6379"]`, false},
		{`addrs = ["127.3.4.5:6379"]`, false},
		{`addrs = ["[::1]:6379"]`, false},
		{`addrs = ["localhost:6379"]`, false},
		{`addrs = ["10.0.0.5:6379"]`, true},
		{`addrs = ["redis.example:6379"]`, true},
		{`addrs = ["[fd00::5]:6379"]`, true},
		{"addrs = [\"127.0.0.1:7000\", \"10.0.0.5:7000\"]\ncluster = true", true},
		{"addrs = [\"10.0.0.5:6379\"]\ntls = true", false},
	} {
		src := "[redis]\n" + tc.redis + "\n\n[[rule]]\nname = \"g\"\npps = 10\nscope = \"global\"\n"
		_, c := parseCompile(t, tc.redis, src, Options{})
		w := strings.Join(c.Warnings(), "\n")
		if got := strings.Contains(w, "not on loopback and tls is off"); got != tc.warn {
			t.Errorf("%s: warnings %q, want the plain-store warning %v", tc.redis, w, tc.warn)
		}
	}
}
