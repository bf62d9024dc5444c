package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
)

// TestLimiterFlagsFromSchema checks that the limiter flags come from the
// rule file's schema: each sets the field policy.Flag names it for, with
// the schema's default in its help, and a flag not given leaves its field
// to the rule's default.
func TestLimiterFlagsFromSchema(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fl := policy.DefineFlags(fs)
	for field, flagName := range map[string]string{"pps": "pps", "max-delay": "max-delay", "flow-timeout": "flow-timeout", "scope": "global", "redis.addrs": "redis"} {
		if got := policy.Flag(field); got != flagName {
			t.Errorf("policy.Flag(%q) = %q, want %q", field, got, flagName)
		}
		if fs.Lookup(flagName) == nil {
			t.Errorf("no --%s", flagName)
		}
	}
	if u := fs.Lookup("max-delay").Usage; !strings.Contains(u, "(default 50ms)") {
		t.Errorf("--max-delay help without the schema's default: %q", u)
	}
	if err := fs.Parse([]string{"--pps", "10", "--global", "--redis", "a:1,b:2", "--flow-timeout", "2m"}); err != nil {
		t.Fatal(err)
	}
	f := fl.File()
	r := f.Rules[0]
	if r.Name != "default" || *r.PPS != 10 || r.Scope != "global" || r.FlowTimeout.String() != "2m0s" || r.Burst != nil || r.Algo != "" {
		t.Errorf("rule from flags: %+v", r)
	}
	if f.Redis == nil || len(f.Redis.Addrs) != 2 || !*f.Redis.Cluster {
		t.Errorf("[redis] from flags: %+v", f.Redis)
	}
}
