package main

import (
	"github.com/packetshaper/packetshaper/internal/inetsum"

	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Helpers of the tests that replay large generated captures through the
// real binary: a fast pcap writer, the build, and a run that reports the
// process's peak RSS.

// capWriter writes a nanosecond pcap of raw IPv4 (LINKTYPE_RAW, 101)
// records, each a 28-byte UDP packet without payload. It is hand-written
// (a 44-byte record patched in place) so that a million packets take a
// fraction of a second; gopacket would take seconds.
type capWriter struct {
	f   *os.File
	w   *bufio.Writer
	rec [16 + 28]byte
	n   int // records written
}

func newCapWriter(path string) (*capWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	c := &capWriter{f: f, w: bufio.NewWriterSize(f, 1<<20)}
	var h [24]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], 0xa1b23c4d) // nanosecond timestamps
	le.PutUint16(h[4:], 2)
	le.PutUint16(h[6:], 4)
	le.PutUint32(h[16:], 65535) // snap length
	le.PutUint32(h[20:], 101)   // LINKTYPE_RAW
	if _, err := c.w.Write(h[:]); err != nil {
		f.Close()
		return nil, err
	}
	r := c.rec[:]
	le.PutUint32(r[8:], 28)
	le.PutUint32(r[12:], 28)
	ip := r[16:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 28)
	ip[8], ip[9] = 64, 17                  // TTL, UDP
	binary.BigEndian.PutUint16(ip[24:], 8) // UDP length; checksum 0: none
	return c, nil
}

// udp writes one UDP packet captured at ns (nanoseconds since the epoch).
func (c *capWriter) udp(ns int64, src, dst [4]byte, sport, dport uint16) error {
	r := c.rec[:]
	le, be := binary.LittleEndian, binary.BigEndian
	le.PutUint32(r[0:], uint32(ns/1e9))
	le.PutUint32(r[4:], uint32(ns%1e9))
	ip := r[16:]
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	ip[10], ip[11] = 0, 0
	be.PutUint16(ip[10:], ^inetsum.Add(ip[:20], 0))
	be.PutUint16(ip[20:], sport)
	be.PutUint16(ip[22:], dport)
	c.n++
	_, err := c.w.Write(r)
	return err
}

func (c *capWriter) close() error {
	err := c.w.Flush()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// buildShaper builds cmd/packetshaper into a temporary directory.
func buildShaper(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "packetshaper")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// rssHelperEnv, when set, makes the test binary the launcher runPeakRSS
// uses (see TestMain).
const rssHelperEnv = "PACKETSHAPER_TEST_RSS_OUT"

// TestMain doubles as runPeakRSS's launcher: with rssHelperEnv set to a
// file name, the test binary runs its arguments as a command and writes the
// command's peak RSS (KiB) and exit status to that file.
//
// Why a launcher: Linux counts in a child's ru_maxrss the high-water RSS of
// the process that forked it (exec keeps the old address space's high-water
// mark in the child's signal struct, and Go forks with CLONE_VM), so a
// command started by a test process that ever held 400 MiB reports at least
// 400 MiB. The launcher is a fresh process of a few MiB.
func TestMain(m *testing.M) {
	if out := os.Getenv(rssHelperEnv); out != "" {
		os.Exit(rssHelper(out, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func rssHelper(out string, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "rss helper: no command")
		return 125
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "rss helper:", err)
		return 125
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "rss helper: no rusage")
		return 125
	}
	code := cmd.ProcessState.ExitCode()
	if werr := os.WriteFile(out, fmt.Appendf(nil, "%d %d\n", ru.Maxrss, code), 0o644); werr != nil {
		fmt.Fprintln(os.Stderr, "rss helper:", werr)
		return 125
	}
	return code
}

// runPeakRSS runs bin with args to completion (exit status 0 required)
// through the launcher in TestMain and returns its stdout and peak resident
// set size in bytes (getrusage's ru_maxrss, which Linux gives in KiB; it
// includes the launcher's few MiB at the fork).
func runPeakRSS(t *testing.T, bin string, args ...string) ([]byte, int64) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command(self, append([]string{bin}, args...)...)
	cmd.Env = append(os.Environ(), rssHelperEnv+"="+res)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var kib int64
	var code int
	if _, err := fmt.Sscan(string(b), &kib, &code); err != nil || code != 0 {
		t.Fatalf("launcher's result %q: %v", b, err)
	}
	return stdout.Bytes(), kib << 10
}

// readVerdicts reads a --verdicts file of n records: accepted[i] for
// record i (from 1).
func readVerdicts(t *testing.T, path string, n int) []bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acc := make([]bool, n+1)
	sc := bufio.NewScanner(bufio.NewReaderSize(f, 1<<20))
	lines := 0
	for sc.Scan() {
		l := sc.Bytes()
		sp := bytes.IndexByte(l, ' ')
		i, err := strconv.Atoi(string(l[:max(sp, 0)]))
		if sp < 0 || err != nil || i < 1 || i > n {
			t.Fatalf("%s: line %d: %q", path, lines+1, l)
		}
		switch string(l[sp+1:]) {
		case "ACCEPT":
			acc[i] = true
		case "DROP":
		default:
			t.Fatalf("%s: line %d: %q", path, lines+1, l)
		}
		lines++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != n {
		t.Fatalf("%s: %d verdicts, want %d", path, lines, n)
	}
	return acc
}

// mib formats a byte count.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
