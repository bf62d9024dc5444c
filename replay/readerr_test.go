package replay

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGzipCorruptNamed: a gzip capture whose deflate stream is damaged
// (an invalid block type) says "gzip: flate: corrupt input", the cause
// found by its type (flate.CorruptInputError), not by its text.
func TestGzipCorruptNamed(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testdata, "multiflow.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.NoCompression)
	zw.Write(raw[:4096])
	zw.Flush() // a stored block ends here, so the next byte is a block header
	head := z.Len()
	zw.Write(raw[4096:])
	zw.Close()
	b := z.Bytes()
	b[head] = 0x07 // BFINAL=1, BTYPE=11: reserved, an error
	_, derr := io.ReadAll(flate.NewReader(bytes.NewReader(b[10:])))
	var ce flate.CorruptInputError
	if !errors.As(derr, &ce) {
		t.Fatalf("the damage is not a corrupt input: %v", derr)
	}
	rd, err := NewReader(bytes.NewReader(b))
	for err == nil {
		_, _, _, err = rd.Next()
	}
	if err == io.EOF || !strings.Contains(err.Error(), "gzip: flate: corrupt input") {
		t.Errorf("damaged gzip capture: %v, want gzip: flate: corrupt input", err)
	}
}
