package clihelp

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// TestSettingArgs: the flags set, in name order, outputs left out, bool
// flags as --name=value, then the files.
func TestSettingArgs(t *testing.T) {
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.String("policy", "", "")
	fs.Bool("concatenate", false, "")
	fs.String("report", "", "")
	fs.Int("queue", 0, "")
	if err := fs.Parse([]string{"--report", "r.html", "--queue", "3", "--policy", "p.toml", "--concatenate"}); err != nil {
		t.Fatal(err)
	}
	got := SettingArgs(fs, map[string]bool{"report": true}, []string{"a.pcap"})
	want := []string{"--concatenate=true", "--policy", "p.toml", "--queue", "3", "a.pcap"}
	if !slices.Equal(got, want) {
		t.Errorf("SettingArgs = %q, want %q", got, want)
	}
}
