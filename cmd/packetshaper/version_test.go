package main

import (
	"bytes"
	"regexp"
	"runtime/debug"
	"strings"
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

// TestVersionStamps: the version comes from -X main.version, else the
// module's build info (go install ...@v1.2.3), and the commit from -X
// main.commit, else the VCS stamp; a build with neither (go build
// -buildvcs=false, or outside a git checkout) says how to stamp one rather
// than "dev (commit unknown)".
func TestVersionStamps(t *testing.T) {
	mod := func(v string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/packetshaper/packetshaper", Version: v}, Settings: settings}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123abc"}
	mod1 := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	for _, c := range []struct {
		v, c string
		bi   *debug.BuildInfo
		want string
	}{
		{"1.0", "abc", mod("(devel)"), "packetshaper 1.0 (commit abc, "},
		{"1.0", "abc", nil, "packetshaper 1.0 (commit abc, "},
		{"", "", mod("v1.2.3"), "packetshaper v1.2.3 (commit unknown, "},
		{"", "", mod("v1.2.3", rev), "packetshaper v1.2.3 (commit 0123abc, "},
		{"", "", mod("(devel)", rev, mod1), "packetshaper dev (commit 0123abc-dirty, "},
		{"", "", mod("(devel)"), `packetshaper dev (no version stamped: scripts/package.sh stamps one, or go build -ldflags "-X main.version=V -X main.commit=$(git rev-parse HEAD)"; go`},
		{"", "", nil, `packetshaper dev (no version stamped: `},
	} {
		if got := versionOf(c.v, c.c, c.bi); !strings.HasPrefix(got, c.want) {
			t.Errorf("versionOf(%q, %q, %+v) = %q, want it to start %q", c.v, c.c, c.bi, got, c.want)
		}
	}
}
