package replay

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

// openCaptureErr opens the capture at name for the test (closed at its
// end); the error is NewReader's, for a test that takes it as its answer.
func openCaptureErr(t *testing.T, name string) (*Reader, error) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return NewReader(f)
}

// openCapture is openCaptureErr for a capture that must read.
func openCapture(t *testing.T, name string) *Reader {
	t.Helper()
	rd, err := openCaptureErr(t, name)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// compileMix compiles testdata's policy-mix.toml and a policy of its third
// rule (UDP to port 53) marking instead of dropping.
func compileMix(t *testing.T) (comp, markComp *policy.Compiled) {
	t.Helper()
	mix, err := policy.Load(filepath.Join(testdata, "policy-mix.toml"))
	if err != nil {
		t.Fatal(err)
	}
	comp, err = mix.Compile(policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	marking := mix.Rules[2]
	marking.OnExceed, marking.SetMark = "mark", "0x1/0x1"
	markComp, err = (&policy.File{Rules: []policy.Rule{marking}}).Compile(policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return comp, markComp
}

// compileEngine parses src (as name) and compiles it, and an engine of the
// policy.
func compileEngine(t testing.TB, name, src string) (*policy.Compiled, *shaper.Engine) {
	t.Helper()
	f := testutil.Must(policy.Parse(name, []byte(src)))(t)
	comp := testutil.Must(f.Compile(policy.Options{}))(t)
	return comp, testutil.Must(shaper.NewPolicy(comp.Policy()))(t)
}

// record is a capture's record as Reader.Next reads it.
type record struct {
	ts   int64 // Nanos
	lt   layers.LinkType
	data string
}

// readRecords reads rd to its end; an error is fatal.
func readRecords(t *testing.T, rd *Reader) []record {
	t.Helper()
	var rs []record
	for {
		data, ci, lt, err := rd.Next()
		if err == io.EOF {
			return rs
		}
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, record{Nanos(&ci), lt, string(data)})
	}
}

// replayVerdicts replays recs, an Ethernet capture (named name), through
// eng and returns the replayer and the verdicts it wrote.
func replayVerdicts(t *testing.T, eng *shaper.Engine, name string, recs []rec) (*Replayer, *bytes.Buffer) {
	t.Helper()
	var verdicts bytes.Buffer
	r := New(eng, Options{Verdicts: &verdicts})
	if err := r.Replay(name, bytes.NewReader(pcapBytes(t, layers.LinkTypeEthernet, recs)), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	return r, &verdicts
}
