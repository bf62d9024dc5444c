package failopen

import (
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/layouttest"
)

// TestPackageLayout: no file of the package (tests aside) over 700 lines,
// and of packetshaper's packages only nfq imported (its public types).
func TestPackageLayout(t *testing.T) {
	layouttest.Check(t, 700, func(path string) string {
		if strings.HasPrefix(path, "github.com/packetshaper/packetshaper/") && path != "github.com/packetshaper/packetshaper/nfq" {
			return "failopen imports nfq only, of packetshaper's packages"
		}
		return ""
	})
}
