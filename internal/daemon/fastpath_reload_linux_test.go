//go:build linux

package daemon

import (
	"fmt"
	"strings"
	"testing"
)

// TestFastpathPrepareRefused: a reload's program the kernel refuses is an
// error of prepare, before anything changed: the running program, its
// rules and counters stay; one it takes replaces it at commit; abort frees
// a prepared one the engine's install refused, the old one staying. Both
// refusals: the test variable for a rule, and a blocklist whose kernel maps
// would be over the maximum.
func TestFastpathPrepareRefused(t *testing.T) {
	pol := rule("k", udpDport(9000), "pps = 10", "burst = 10")
	fp := loadFast(t, pol)
	old := fp.prog
	t.Setenv(refuseRuleEnv, "block")
	block := pol + rule("block", udpDport(9001), `action = "drop"`)
	big := strings.Replace(pol, "burst = 10", "burst = 10\nmax-flows = 4194304", 1)
	for what, text := range map[string]string{"a rule refused": block, "maps over the maximum": big} {
		n, err := fp.prepare(compile(t, text))
		if err == nil || n != nil || !strings.Contains(err.Error(), "fast path: ") {
			t.Errorf("%s: prepare %v, %v; want the kernel's refusal", what, n, err)
		}
		if fp.prog != old || fmt.Sprint(fp.index) != "map[k:0]" {
			t.Errorf("%s: the refused reload changed the running program (%v)", what, fp.index)
		}
	}
	n, err := fp.prepare(compile(t, strings.Replace(pol, "pps = 10", "pps = 20", 1)))
	if err != nil || n == nil {
		t.Fatalf("prepare of a program the kernel takes: %v", err)
	}
	fp.abort(n)
	if fp.prog != old {
		t.Error("abort changed the running program")
	}
	n, err = fp.prepare(compile(t, strings.Replace(pol, "pps = 10", "pps = 20", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := fp.commit(n); err != nil || fp.prog == old || fp.prog != n.prog {
		t.Errorf("commit: %v; want the new program running", err)
	}
}
