package timing

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records what Check says.
type recorder struct {
	testing.TB
	errs, logs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, format)
}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, format)
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		env        string
		ok         bool
		errs, logs int
	}{
		{"1", true, 0, 1},
		{"1", false, 1, 0},
		{"", true, 0, 0},
		{"", false, 0, 1},
		{"0", false, 0, 1},
	} {
		t.Setenv(Env, tc.env)
		r := &recorder{TB: t}
		Check(r, tc.ok, "figure %d, bound %d", 2, 1)
		if len(r.errs) != tc.errs || len(r.logs) != tc.logs {
			t.Errorf("%s=%q ok=%v: errors %q, logs %q; want %d errors, %d logs", Env, tc.env, tc.ok, r.errs, r.logs, tc.errs, tc.logs)
		}
		for _, s := range append(r.errs, r.logs...) {
			if !strings.Contains(s, "load average") {
				t.Errorf("%q does not give the load average", s)
			}
		}
	}
}

func TestLoad(t *testing.T) {
	l := Load()
	if l == "?" {
		t.Skip("no /proc/loadavg on this machine")
	}
	if f := strings.Fields(l); len(f) != 3 {
		t.Errorf("Load() = %q, want three figures", l)
	}
}
