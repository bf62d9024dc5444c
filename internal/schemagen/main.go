// Command schemagen writes the rule file's reference,
// docs/configuration-reference.md, from the schema in package policy
// (go generate ./policy).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/packetshaper/packetshaper/policy"
)

func main() {
	out := flag.String("o", "docs/configuration-reference.md", "the `FILE` to write")
	flag.Parse()
	var b bytes.Buffer
	if err := policy.WriteReference(&b); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}
