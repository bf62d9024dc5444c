package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpStartsWithUsage: every command's --help opens with its usage
// lines, then what it does in one sentence; the long description comes
// after the flags (it opened the root's help with 28 lines of prose).
func TestHelpStartsWithUsage(t *testing.T) {
	root := newRootCmd(&cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	cmds := [][]string{{"--help"}}
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			cmds = append(cmds, []string{c.Name(), "--help"})
		}
	}
	for _, args := range cmds {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		paras := strings.Split(out.String(), "\n\n")
		if !strings.HasPrefix(paras[0], "Usage:\n  packetshaper") || len(paras) < 2 {
			t.Errorf("%v: help does not start with the usage:\n%s", args, out.String())
			continue
		}
		if s := paras[1]; strings.Contains(s, "\n") || !strings.HasSuffix(s, ".") || strings.Count(strings.TrimSuffix(s, "."), ". ") > 0 {
			t.Errorf("%v: the usage is followed by %q, want one sentence", args, s)
		}
	}
}
