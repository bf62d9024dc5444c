package testutil

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOnlyTestsImport: no file of the project but a _test.go file, or one
// of the test-only helper packages (this one and internal/netnstest, which
// builds on it), imports them.
func TestOnlyTestsImport(t *testing.T) {
	const module = "github.com/packetshaper/packetshaper/"
	testOnly := map[string]bool{module + "internal/testutil": true, module + "internal/netnstest": true}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || testOnly[module+filepath.ToSlash(rel)] {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); testOnly[p] {
				t.Errorf("%s imports %s: only _test.go files may", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("checked %d files: the walk misses the project", n)
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 || b.Len() != 1600 {
		t.Fatalf("%d lines, %d bytes; want 800, 1600", n, b.Len())
	}
}

func TestWaitFor(t *testing.T) {
	calls := 0
	if !WaitFor(t, time.Minute, func() bool { calls++; return calls == 5 }) || calls != 5 {
		t.Fatalf("WaitFor returned after %d checks, want true after 5", calls)
	}
	// A condition that never holds: false once the timeout passed, and
	// checked once more at the deadline.
	calls = 0
	if WaitFor(t, 0, func() bool { calls++; return false }) || calls != 2 {
		t.Fatalf("WaitFor with a false condition: %d checks, want false after 2", calls)
	}
	Eventually(t, time.Minute, func() bool { return true }, "never")
}

// netnsID names the network namespace of the calling thread.
func netnsID(t *testing.T) string {
	t.Helper()
	id, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestNetns: NewNetns makes a namespace RunIn and Do reach (lo up),
// Do's thread goes back to its own namespace, and the namespace is gone
// after the test.
func TestNetns(t *testing.T) {
	NeedRoot(t, "creates a network namespace")
	NeedTools(t, "ip")
	name := fmt.Sprintf("pst-%d-netns", os.Getpid())
	t.Run("in", func(t *testing.T) {
		NewNetns(t, name)
		out, err := RunIn(name, CmdTimeout, "ip", "-o", "link", "show", "lo")
		if err != nil || !strings.Contains(out, "UP") {
			t.Fatalf("lo in %s: %v: %s", name, err, out)
		}
		runtime.LockOSThread() // the test's thread, to compare before and after
		defer runtime.UnlockOSThread()
		own := netnsID(t)
		var in string
		if err := Do(name, func() error { in = netnsID(t); return nil }); err != nil {
			t.Fatal(err)
		}
		if in == own || in == "" {
			t.Fatalf("Do ran in %q, the test's own namespace is %q", in, own)
		}
		if now := netnsID(t); now != own {
			t.Fatalf("after Do the thread is in %s, want its own %s", now, own)
		}
		if err := Do(name, func() error { return syscall.EPERM }); err != syscall.EPERM {
			t.Fatalf("Do returned %v, want f's error", err)
		}
	})
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil || strings.Contains(string(out), name) {
		t.Fatalf("%s not removed after the test: %v: %s", name, err, out)
	}
}

// TestUnshare: the goroutine's thread is in a namespace of its own, which
// DoFd reaches from another goroutine.
func TestUnshare(t *testing.T) {
	NeedRoot(t, "creates a network namespace")
	var own, in, other string
	t.Run("unshared", func(t *testing.T) {
		fd := Unshare(t)
		in = netnsID(t)
		errc := make(chan error, 1)
		go func() {
			errc <- DoFd(fd, func() error {
				id, err := os.Readlink("/proc/thread-self/ns/net")
				other = id
				return err
			})
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
	runtime.LockOSThread()
	own = netnsID(t)
	runtime.UnlockOSThread()
	if in == "" || in == own || other != in {
		t.Fatalf("Unshare's namespace %q, DoFd's %q, the test's %q", in, other, own)
	}
}

// TestRedis: a server starts, answers, stops at Kill and starts again on
// its port.
func TestRedis(t *testing.T) {
	r := StartRedis(t, "--maxmemory", "10mb")
	if got := r.Cli("ping"); got != "PONG" {
		t.Fatalf("ping: %q", got)
	}
	if got := r.Cli("config", "get", "maxmemory"); !strings.Contains(got, "10485760") {
		t.Fatalf("extra arguments not passed: config get maxmemory: %q", got)
	}
	r.Cli("set", "k", "v")
	r.Kill()
	if out, err := exec.Command("redis-cli", "-p", strconv.Itoa(r.Port), "ping").CombinedOutput(); err == nil && strings.Contains(string(out), "PONG") {
		t.Fatalf("the server answers after Kill: %s", out)
	}
	r.Start()
	if got := r.Cli("dbsize"); got != "0" {
		t.Fatalf("restarted without persistence: dbsize %q, want 0", got)
	}
	if n := r.Info("total_connections_received"); n < 1 {
		t.Fatalf("total_connections_received %d", n)
	}
}
