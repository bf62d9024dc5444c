package term

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFold: a log line longer than the terminal is wrapped at spaces, its
// continuation lines indented, nothing lost; short lines pass as they are.
func TestFold(t *testing.T) {
	var words []string
	for i := range 120 {
		words = append(words, "rule.web.k"+strings.Repeat("x", i%7)+"=1")
	}
	long := "time=2026-12-02T03:00:00Z level=INFO msg=\"final stats\" " + strings.Join(words, " ")
	var out bytes.Buffer
	f := &foldWriter{w: &out, width: 80}
	if _, err := f.Write([]byte(long + "\nshort line\n")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 10 || lines[len(lines)-1] != "short line" {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	var back []string
	for i, l := range lines[:len(lines)-1] {
		if len(l) > 80 {
			t.Errorf("line %d is %d columns, want at most 80: %q", i, len(l), l)
		}
		if i > 0 && !strings.HasPrefix(l, foldIndent) {
			t.Errorf("continuation line %d not indented: %q", i, l)
		}
		back = append(back, strings.TrimPrefix(l, foldIndent))
	}
	if got := strings.Join(back, " "); got != long {
		t.Errorf("unwrapped, the line differs:\n got %q\nwant %q", got, long)
	}
	// A word longer than the width stays whole.
	out.Reset()
	f.Write([]byte(strings.Repeat("y", 100) + " z\n"))
	if out.String() != strings.Repeat("y", 100)+"\n"+foldIndent+"z\n" {
		t.Errorf("a long word: %q", out.String())
	}
}

// TestProgressBar: nothing during the first second, then a bar with the
// fraction of the file read, cleared at the end.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	b := NewBar(&buf, time.Now())
	b.Update("f.pcap", 50, 100, 7)
	if buf.Len() != 0 {
		t.Errorf("drawn within the first second: %q", buf.String())
	}
	b.start = time.Now().Add(-2 * time.Second)
	b.Update("f.pcap", 50, 100, 65536)
	if got := buf.String(); !strings.Contains(got, "[===============               ]  50% f.pcap: 65536 packets") {
		t.Errorf("bar %q", got)
	}
	buf.Reset()
	b.Clear()
	if buf.String() != "\r\x1b[K" {
		t.Errorf("clear wrote %q", buf.String())
	}
}

// TestIsTerminal: a pseudo-terminal is a terminal; a pipe, a file and
// /dev/null are not.
func TestIsTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	if !IsTerminal(pts) {
		t.Errorf("IsTerminal(%s) = false", pts.Name())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	for _, f := range []*os.File{w, devnull} {
		if IsTerminal(f) {
			t.Errorf("IsTerminal(%s) = true", f.Name())
		}
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Errorf("IsTerminal(bytes.Buffer) = true")
	}
}
