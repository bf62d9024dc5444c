// Package buildinfo is packetshaper's version as a build stamped it: the
// -X main.version and main.commit a build sets (scripts/package.sh), else
// the module's version and the VCS stamp of the build info.
//
// It imports nothing of ours: any package may use it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// stamped resolves the stamps v and c with the build info bi (nil: none):
// the version ("" if none), the commit ("" if none) and whether go build
// found the tree modified.
func stamped(v, c string, bi *debug.BuildInfo) (string, string, bool) {
	dirty := false
	if bi == nil {
		return v, c, false
	}
	if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if c == "" {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	return v, c, dirty && c != ""
}

// Version is the version alone of the stamps v and c and the build info
// bi, "dev" when none is stamped (status, packetshaper_build_info).
func Version(v, c string, bi *debug.BuildInfo) string {
	if v, _, _ := stamped(v, c, bi); v != "" {
		return v
	}
	return "dev"
}

// Line is what "packetshaper --version" prints for the stamps v and c and
// the build info bi (nil: none): the version, the commit ("-dirty" when
// built from a modified tree and stamped by go build) and the Go version.
// A build with neither stamp says how to stamp one.
func Line(v, c string, bi *debug.BuildInfo) string {
	v, c, dirty := stamped(v, c, bi)
	switch {
	case v == "" && c == "":
		return fmt.Sprintf("packetshaper dev (no version stamped: scripts/package.sh stamps one, or go build -ldflags \"-X main.version=V -X main.commit=$(git rev-parse HEAD)\"; %s)", runtime.Version())
	case v == "":
		v = "dev"
	case c == "":
		c = "unknown"
	}
	if dirty {
		c += "-dirty"
	}
	return fmt.Sprintf("packetshaper %s (commit %s, %s)", v, c, runtime.Version())
}
