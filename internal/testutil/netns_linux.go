package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CmdTimeout bounds each setup command these helpers run (ip, iptables).
const CmdTimeout = 30 * time.Second

// NeedRoot skips t, saying why (what the test creates), when not root.
// Root-only tests run as root (CI) and may skip only otherwise.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("skipped: needs root (%s)", why)
	}
}

// NeedTools fails t when one of tools is not installed (as root, where the
// tests must run) and skips it otherwise.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("%s not found: install it (scripts/test.sh does)", tool)
			}
			t.Skipf("%s not found (scripts/test.sh installs it as root)", tool)
		}
	}
}

// MustRun runs name args in the calling thread's namespace, bounded by
// CmdTimeout, fails t on error with the command's output, and returns
// its combined output.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NewNetns creates the named network namespace (ip netns add) with lo up
// and registers its removal with t.Cleanup, which runs even when the test
// fails (a removal that fails is a test error). Removing the namespace
// removes what is in it: links, rules, bound queues. Name it so that a
// later run can tell a namespace a crashed run left (e2e puts its pid in
// the name).
func NewNetns(t testing.TB, name string) string {
	t.Helper()
	MustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns del %s: %v: %s", name, err, out)
		}
	})
	MustRun(t, "ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
	return name
}

// RunIn runs args in the named namespace (ip netns exec), bounded by
// timeout, and returns its combined output.
func RunIn(ns string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// Unshare moves the calling goroutine, locked to its OS thread, into a new
// network namespace with lo up, and returns a file descriptor of that
// namespace (closed by t.Cleanup) for other goroutines to join with DoFd.
// The thread is deliberately never unlocked: it leaves with the namespace
// when the goroutine exits (the runtime ends a thread that exits locked).
// Processes started from it get their Pdeathsig when the goroutine ends.
// It skips t when not root.
func Unshare(t testing.TB) (nsFd int) {
	t.Helper()
	NeedRoot(t, "creates a network namespace")
	NeedTools(t, "ip")
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET): %v", err)
	}
	MustRun(t, "ip", "link", "set", "lo", "up")
	nsFd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(nsFd) })
	return nsFd
}

// Do runs f on a thread of its own that joins the named namespace (one of
// NewNetns's) for the while, and returns f's error.
func Do(ns string, f func() error) error {
	fd, err := unix.Open(filepath.Join("/var/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return DoFd(fd, f)
}

// DoFd runs f on the calling goroutine's thread, locked and moved into the
// namespace of nsFd for the while, and returns f's error. The thread goes
// back to its own namespace before it is unlocked; if it cannot, it stays
// locked and the runtime ends it when the goroutine exits. Never unlock a
// thread in another namespace (it would run other goroutines there), nor
// let one that started processes end while they run: their Pdeathsig is
// the thread's, not the process's, so they would be SIGKILLed. f must not
// unlock the thread.
func DoFd(nsFd int, f func() error) error {
	runtime.LockOSThread()
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(own)
	if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns: %w", err)
	}
	defer func() {
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return f()
}
