package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/layouttest"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestErrorChain checks that a policy error keeps the engine's typed error
// it comes from (%w), with the field the engine names.
func TestErrorChain(t *testing.T) {
	_, err := Parse("p.toml", []byte("[[rule]]\nname = \"a\"\npps = 1\nburst = 0.5\n"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Field != "burst" {
		t.Fatalf("not a policy error at burst: %v", err)
	}
	_, err = Parse("p.toml", []byte("[[rule]]\nname = \"a\"\npps = 0.5\nalgo = \"fixed-window\"\nwindow = \"1s\"\n"))
	var ce *shaper.ConfigError
	if !errors.As(err, &ce) || ce.Settings[0] != shaper.SettingWindow {
		t.Fatalf("no shaper.ConfigError about the window in the chain: %v", err)
	}
	if !errors.As(err, &pe) || pe.Field != "window" {
		t.Errorf("reported at %q, want window: %v", pe.Field, err)
	}
}

// sources are the non-test Go files of the module, by path from its root.
func sources(t *testing.T) map[string]string {
	out := map[string]string{}
	root := layouttest.ModuleRoot(t)
	for _, n := range layouttest.SourceFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = string(b)
	}
	return out
}

// TestFieldNamesOnce checks that the rule file's field names (the ones no
// other word shares: those with a "-") are string literals in at most two
// files: the schema, and the validation that words its messages.
func TestFieldNamesOnce(t *testing.T) {
	src := sources(t)
	for i := range schema {
		f := &schema[i]
		if !strings.Contains(f.name, "-") {
			continue
		}
		var in []string
		for name, text := range src {
			if strings.Contains(text, `"`+f.name+`"`) {
				in = append(in, name)
			}
		}
		if len(in) > 2 {
			t.Errorf("%q is a literal in %d files: %v", f.name, len(in), in)
		}
	}
}

// TestNoErrorStringSurgery, once here for the rule file's path, is now
// module-wide in internal/layouttest.
