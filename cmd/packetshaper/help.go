package main

import (
	"embed"
	"strings"
)

// The commands' long help (cobra's Long, the man pages' DESCRIPTION):
// prose kept in help/NAME.txt, one file a command.
//
//go:embed help/*.txt
var helpFiles embed.FS

// help is the long help of command name, without the file's final newline.
func help(name string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic(err) // a missing file is a build defect, caught by every test
	}
	return strings.TrimSuffix(string(b), "\n")
}
