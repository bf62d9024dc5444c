//go:build linux

package fastpath

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestLoadErrorOneLine: a refusal is one line naming the verifier's reason,
// and keeps its cause for errors.Is.
func TestLoadErrorOneLine(t *testing.T) {
	ve := &ebpf.VerifierError{Cause: unix.EACCES, Log: []string{
		"0: (b7) r0 = 0", "R1 invalid mem access 'scalar'", "processed 12 insns (limit 1000000)", ""}}
	err := loadError(ve)
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "invalid mem access") || !strings.HasPrefix(msg, "the kernel refused the fast path program") {
		t.Errorf("%q", msg)
	}
	if !errors.Is(err, unix.EACCES) {
		t.Errorf("%v does not wrap EACCES", err)
	}
	if msg := loadError(errors.New("a\nb")).Error(); strings.Contains(msg, "\n") {
		t.Errorf("%q is not one line", msg)
	}
}
