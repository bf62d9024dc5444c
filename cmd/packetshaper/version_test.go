package main

import (
	"bytes"
	"regexp"
	"testing"
)

// TestVersion: --version and version print one line with the version and
// the commit that -ldflags -X set (scripts/package.sh sets both).
func TestVersion(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "1.2.3~git20260101.abc1234", "abc1234def"
	want := regexp.MustCompile(`^packetshaper 1\.2\.3~git20260101\.abc1234 \(commit abc1234def, go[^)]+\)\n$`)
	for _, arg := range []string{"--version", "version"} {
		var out, errb bytes.Buffer
		if rc := run([]string{arg}, &out, &errb); rc != 0 || !want.MatchString(out.String()) || errb.Len() != 0 {
			t.Errorf("packetshaper %s: exit %d, stdout %q, stderr %q; want 0 and %v", arg, rc, out.String(), errb.String(), want)
		}
	}
	// Without -X main.commit: the build's VCS stamp, or "unknown".
	commit = ""
	var out bytes.Buffer
	if rc := run([]string{"--version"}, &out, &out); rc != 0 || !regexp.MustCompile(`^packetshaper \S+ \(commit ([0-9a-f]+(-dirty)?|unknown), go`).MatchString(out.String()) {
		t.Errorf("packetshaper --version without a commit: exit %d, %q", rc, out.String())
	}
}
