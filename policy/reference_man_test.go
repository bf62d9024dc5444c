package policy

import (
	"bytes"
	"os"
	"testing"
)

// TestManPageUpToDate fails when docs/man/packetshaper.toml.5 is not what
// the schema generates (go generate ./policy), or lacks a field.
func TestManPageUpToDate(t *testing.T) {
	have, err := os.ReadFile("../docs/man/packetshaper.toml.5")
	if err != nil {
		t.Fatalf("%v: run go generate ./policy", err)
	}
	var want bytes.Buffer
	if err := WriteManPage(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Errorf("docs/man/packetshaper.toml.5 is stale: run go generate ./policy")
	}
	for _, names := range [][]string{ruleFieldNames, matchFieldNames, redisFieldNames} {
		for _, n := range names {
			if !bytes.Contains(want.Bytes(), []byte(".B "+roffEscape(n)+"\n")) {
				t.Errorf("man page lacks %q", n)
			}
		}
	}
}
