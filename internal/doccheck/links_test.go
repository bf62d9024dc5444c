package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// docs are the files whose relative links must resolve.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no docs/*.md found")
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	return files
}

var (
	linkRE    = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE    = regexp.MustCompile("`[^`]*`")
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading's text: inline links reduced to
// their text, lower case, every character but letters, digits, '-', '_'
// and spaces dropped, spaces turned into '-'.
func slug(h string) string {
	h = inlineRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lines returns a file's lines outside fenced code blocks.
func lines(text string) []string {
	var out []string
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, l)
		}
	}
	return out
}

// anchors returns the anchors of a markdown file's headings, duplicates
// numbered as GitHub numbers them (-1, -2, ...).
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	a := map[string]bool{}
	for _, l := range lines(text) {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			a[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	return a
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Shaping: the leaky bucket":                                 "shaping-the-leaky-bucket",
		"Flows and status: the control socket":                      "flows-and-status-the-control-socket",
		"Limiter flags (live and replay)":                           "limiter-flags-live-and-replay",
		"Two queues: `sudo PARTS=queues REPS=5 ./scripts/bench.sh`": "two-queues-sudo-partsqueues-reps5-scriptsbenchsh",
		"Dependencies, and why each is there":                       "dependencies-and-why-each-is-there",
		"Levers tried (`Config.RealtimePriority` kept, opt-in)":     "levers-tried-configrealtimepriority-kept-opt-in",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRelativeLinks checks every relative link (and image) of the docs:
// the file exists, and a #fragment is one of its headings' anchors.
func TestRelativeLinks(t *testing.T) {
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", err
		}
		texts[rel] = string(b)
		return string(b), nil
	}
	checked := 0
	for _, doc := range docs(t) {
		text, err := read(doc)
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		for i, l := range lines(text) {
			l = codeRE.ReplaceAllString(l, "")
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				rel := doc
				if file != "" {
					rel = filepath.Clean(filepath.Join(filepath.Dir(doc), file))
				}
				if strings.HasPrefix(rel, "..") {
					t.Errorf("%s (line %d of its text): link %q leaves the repository", doc, i+1, target)
					continue
				}
				st, err := os.Stat(filepath.Join(root, rel))
				if err != nil {
					t.Errorf("%s: link %q: %s does not exist", doc, target, rel)
					continue
				}
				if frag == "" {
					continue
				}
				if st.IsDir() || !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s: link %q: a fragment on %s, which is not a markdown file", doc, target, rel)
					continue
				}
				dst, err := read(rel)
				if err != nil {
					t.Errorf("%s: link %q: %v", doc, target, err)
					continue
				}
				if !anchors(dst)[frag] {
					t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", doc, target, rel, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the link pattern is broken")
	}
	t.Logf("%d relative links checked", checked)
}

// TestReadmeShort keeps the README an overview: details go to docs/.
func TestReadmeShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, at most 300: move details into docs/", n)
	}
}

// TestReadmeFigures: the README's figures are one set: no table cell a
// reader has to wade through (over 100 words), and the comparison table's
// cost cell quotes the Performance section's ratios (issue 30: they
// disagreed).
func TestReadmeFigures(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	var cost string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		for _, c := range strings.Split(l, "|") {
			if n := len(strings.Fields(c)); n > 100 {
				t.Errorf("README table cell of %d words, at most 100: %.60s...", n, strings.TrimSpace(c))
			}
		}
		if strings.HasPrefix(l, "| cost |") {
			cost = l
		}
	}
	perf := s[strings.Index(s, "## Performance"):]
	ratio := regexp.MustCompile(`\d+\.\d+(–\d+\.\d+)?×`)
	got := ratio.FindAllString(cost, -1)
	if len(got) == 0 {
		t.Fatalf("the comparison table's cost cell quotes no ratio: %q", cost)
	}
	for _, r := range got {
		lo, hi, _ := strings.Cut(strings.TrimSuffix(r, "×"), "–")
		for _, x := range []string{lo, hi} {
			if x != "" && !strings.Contains(perf, x+"×") && !strings.Contains(perf, x+"–") {
				t.Errorf("the comparison table says %s, which the Performance section does not", r)
			}
		}
	}
}

// TestNoMovedFiles: the files merged into docs/design.md are gone, and no
// document still points at them.
func TestNoMovedFiles(t *testing.T) {
	for _, gone := range []string{"nfq/PERFORMANCE.md", "scripts/BENCH.md"} {
		if _, err := os.Stat(filepath.Join(root, gone)); err == nil {
			t.Errorf("%s exists: its content is in docs/design.md", gone)
		}
		for _, doc := range docs(t) {
			b, err := os.ReadFile(filepath.Join(root, doc))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, gone) && !strings.Contains(l, "commit ") {
					t.Errorf("%s:%d mentions %s, merged into docs/design.md", doc, i+1, gone)
				}
			}
		}
	}
}
