package policy

import (
	"bytes"
	"os"
	"testing"
)

// TestReferenceUpToDate fails when docs/configuration-reference.md is not
// what the schema generates: run go generate ./policy.
func TestReferenceUpToDate(t *testing.T) {
	have, err := os.ReadFile("../docs/configuration-reference.md")
	if err != nil {
		t.Fatalf("%v: run go generate ./policy", err)
	}
	var want bytes.Buffer
	if err := WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Errorf("docs/configuration-reference.md is stale: run go generate ./policy")
	}
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
