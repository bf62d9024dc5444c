package fastpath

import (
	"fmt"
	"strings"
)

// AttachMode is how the program is attached at an interface's ingress.
type AttachMode string

// The attach modes (--fastpath-attach).
const (
	// AttachAuto tries tcx and falls back to tc when the kernel answers
	// that it has no tcx (a probe, never the version number).
	AttachAuto AttachMode = "auto"
	// AttachTCX: a tcx link (kernel 6.6 and later), owned by this
	// process: its end, a SIGKILL too, detaches the program.
	AttachTCX AttachMode = "tcx"
	// AttachTC: a direct-action cls_bpf filter on a clsact qdisc (any
	// kernel with clsact, 4.5 and later). The filter holds the program:
	// it outlives a SIGKILL until the next start removes it
	// (RemoveLeftover).
	AttachTC AttachMode = "tc"
)

// AttachModes are the modes --fastpath-attach takes.
var AttachModes = []AttachMode{AttachAuto, AttachTCX, AttachTC}

// ParseAttachMode parses an attach mode's name (--fastpath-attach's
// value); its error names the mode, the command its flag.
func ParseAttachMode(s string) (AttachMode, error) {
	for _, m := range AttachModes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(AttachModes))
	for i, m := range AttachModes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("attach mode %q is not one of %s", s, strings.Join(names, ", "))
}
