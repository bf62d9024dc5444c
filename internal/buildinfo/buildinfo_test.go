package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

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
		if got := Line(c.v, c.c, c.bi); !strings.HasPrefix(got, c.want) {
			t.Errorf("Line(%q, %q, %+v) = %q, want it to start %q", c.v, c.c, c.bi, got, c.want)
		}
	}
}
