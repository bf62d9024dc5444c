package nfq

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/layouttest"
)

// TestPackageLayout keeps nfq to its one job (issue 18): no file of the
// package (tests aside) over 700 lines, and no import of nf_tables
// (package failopen reads rule counters) or of another package of
// packetshaper (nfq knows neither flows nor limiters, nor failopen) but
// the leaf internal/hist, the project's one histogram (its latencies).
func TestPackageLayout(t *testing.T) {
	layouttest.Check(t, 700, func(path string) string {
		switch {
		case strings.Contains(path, "nftables"), strings.HasPrefix(path, "github.com/mdlayher/"):
			return "nfq speaks nfnetlink_queue only (nf_tables is failopen's)"
		case path == "github.com/packetshaper/packetshaper/internal/hist":
			return ""
		case strings.HasPrefix(path, "github.com/packetshaper/packetshaper/"):
			return "nfq imports no package of packetshaper"
		}
		return ""
	})
}
