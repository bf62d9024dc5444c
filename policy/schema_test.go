package policy

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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

// sources are the non-test Go files of the packages the schema serves.
func sources(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, dir := range []string{".", "../shaper", "../cmd/packetshaper", "../internal/daemon", "../flows", "../internal/report", "../replay"} {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasSuffix(n, "_test.go") {
				continue
			}
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Clean(n)] = string(b)
		}
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

// TestNoErrorStringSurgery checks that no code of the rule file's path
// (policy, shaper, flows, the command's flags) takes errors apart by their
// text: no prefix stripped from or tested on an error's message. (The
// daemon's control-socket and store errors are not on that path.)
func TestNoErrorStringSurgery(t *testing.T) {
	surgery := regexp.MustCompile(`(TrimPrefix|HasPrefix|CutPrefix)\([^)]*(\.Msg|Error\(\))|"(shaper|flows): "`)
	for name, text := range sources(t) {
		if strings.HasPrefix(name, "../internal/daemon") {
			continue
		}
		if m := surgery.FindString(text); m != "" {
			t.Errorf("%s: error-string surgery: %s", name, m)
		}
	}
}
