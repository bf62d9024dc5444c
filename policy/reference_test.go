package policy

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// TestReferenceUpToDate fails when docs/configuration-reference.md is not
// what the schema generates: run go generate ./policy.
func TestReferenceUpToDate(t *testing.T) {
	checkGenerated(t, "docs/configuration-reference.md", WriteReference)
}

// checkGenerated fails the test when the file doc (from the module's
// root) is not what write generates, and returns what write generates.
func checkGenerated(t *testing.T, doc string, write func(io.Writer) error) []byte {
	t.Helper()
	have, err := os.ReadFile("../" + doc)
	if err != nil {
		t.Fatalf("%v: run go generate ./policy", err)
	}
	var want bytes.Buffer
	if err := write(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Errorf("%s is stale: run go generate ./policy", doc)
	}
	return want.Bytes()
}

// TestReferenceHasEveryField checks that the reference names every field
// the walk accepts.
func TestReferenceHasEveryField(t *testing.T) {
	var b bytes.Buffer
	WriteReference(&b)
	for _, names := range [][]string{ruleFieldNames, matchFieldNames, redisFieldNames} {
		for _, n := range names {
			if !bytes.Contains(b.Bytes(), []byte("| `"+n+"` |")) {
				t.Errorf("reference lacks %q", n)
			}
		}
	}
}
