// Command schemagen writes the rule file's reference,
// docs/configuration-reference.md, and its man page,
// docs/man/packetshaper.toml.5 (by default in man/ beside -o), from the
// schema in package policy (go generate ./policy).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/packetshaper/packetshaper/policy"
)

func main() {
	out := flag.String("o", "docs/configuration-reference.md", "the `FILE` to write")
	man := flag.String("man", "", "the man page `FILE` to write (default: man/packetshaper.toml.5 in -o's directory)")
	flag.Parse()
	if *man == "" {
		*man = filepath.Join(filepath.Dir(*out), "man", "packetshaper.toml.5")
	}
	write(*out, policy.WriteReference)
	write(*man, policy.WriteManPage)
}

// write writes file with gen, or exits.
func write(file string, gen func(io.Writer) error) {
	var b bytes.Buffer
	if err := gen(&b); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}
