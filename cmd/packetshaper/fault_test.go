package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// faultEnv, when set, makes TestRuntimeFaultIsNotExit2's child: it does as
// runLive does first (crashOnFault), then panics in a goroutine.
const faultEnv = "PACKETSHAPER_TEST_FAULT"

// TestRuntimeFaultIsNotExit2: a panic nothing recovers, in any goroutine of
// the live shaper, ends it by SIGABRT, not with exit status 2, which the
// unit (RestartPreventExitStatus=2) takes for a configuration error and
// does not restart (issue 29). Without crashOnFault the child exits 2.
func TestRuntimeFaultIsNotExit2(t *testing.T) {
	if os.Getenv(faultEnv) == "1" {
		// No core file in the package's directory.
		_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
		crashOnFault()
		go panic("a runtime fault")
		time.Sleep(10 * time.Second)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRuntimeFaultIsNotExit2$")
	cmd.Env = append(os.Environ(), faultEnv+"=1", "GOTRACEBACK=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the child: %v, want it killed by SIGABRT\n%s", err, stderr.String())
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		t.Fatalf("the child ended with %v (exit status %d), want SIGABRT\n%s", err, ws.ExitStatus(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "panic: a runtime fault") {
		t.Errorf("stderr has no panic trace:\n%s", stderr.String())
	}
}
