package testutil

import "strings"

// PolicyRule is a policy file's [[rule]] table, for the tests that write
// policies: its name, its match (the inline table's fields, as TOML; none
// for ""), and its other settings, one a line ("pps = 10").
func PolicyRule(name, match string, settings ...string) string {
	var b strings.Builder
	b.WriteString("\n[[rule]]\nname = \"" + name + "\"\n")
	if match != "" {
		b.WriteString("match = { " + match + " }\n")
	}
	for _, s := range settings {
		b.WriteString(s + "\n")
	}
	return b.String()
}
