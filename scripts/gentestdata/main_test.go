package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckedInCapturesAreGenerated regenerates every capture and compares
// it with the one checked in under testdata/: the fixtures are what this
// generator writes, so anyone can regenerate them. Gzip files are compared
// by their content (the compressed bytes depend on Go's compress/flate).
func TestCheckedInCapturesAreGenerated(t *testing.T) {
	for _, f := range files {
		got, err := f.gen()
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "testdata", f.name))
		if err != nil {
			t.Fatalf("%s: %v (go run ./scripts/gentestdata writes it)", f.name, err)
		}
		if strings.HasSuffix(f.name, ".gz") {
			got, want = gunzip(t, got), gunzip(t, want)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: generated %d bytes differ from the checked-in %d (go run ./scripts/gentestdata rewrites testdata/)", f.name, len(got), len(want))
		}
		again, _ := f.gen()
		if strings.HasSuffix(f.name, ".gz") {
			again = gunzip(t, again)
		}
		if !bytes.Equal(got, again) {
			t.Errorf("%s: two generations differ", f.name)
		}
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
