package fastpath

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates the program's object and Go bindings
// with gen.go's own go:generate command into a temporary directory and
// fails when they differ from the committed ones: bpf/fastpath.c or a header
// it includes (bpf/*.h) changed without go generate. The output is byte-identical from run to run (bpf2go
// strips debug info; the BTF it keeps names the source by its relative
// path), so the comparison is of the bytes.
func TestGeneratedUpToDate(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("no clang: cannot regenerate the fast path's object (apt-get install clang llvm libbpf-dev)")
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(l, "//go:generate go "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) == 0 {
		t.Fatal("gen.go has no //go:generate go ... line")
	}
	dir := t.TempDir()
	// bpf2go's flags go before its two positional arguments.
	i := 0
	for i < len(args) && args[i] != "fastpath" {
		i++
	}
	args = append(append(append([]string{}, args[:i]...), "-output-dir", dir), args[i:]...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=fastpath")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, name := range []string{"fastpath_bpfel.o", "fastpath_bpfel.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: bpf/fastpath.c, bpf/*.h or gen.go changed; run go generate ./internal/fastpath and commit the result", name)
		}
	}
}
