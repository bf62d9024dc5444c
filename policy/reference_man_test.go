package policy

import (
	"bytes"
	"testing"
)

// TestManPageUpToDate fails when docs/man/packetshaper.toml.5 is not what
// the schema generates (go generate ./policy), or lacks a field.
func TestManPageUpToDate(t *testing.T) {
	want := checkGenerated(t, "docs/man/packetshaper.toml.5", WriteManPage)
	for _, names := range [][]string{ruleFieldNames, matchFieldNames, redisFieldNames} {
		for _, n := range names {
			if !bytes.Contains(want, []byte(".B "+roffEscape(n)+"\n")) {
				t.Errorf("man page lacks %q", n)
			}
		}
	}
}
