package suggest

import (
	"slices"
	"testing"
)

// TestDistance: a swap is one edit.
func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"burts", "burst", 1}, {"", "abc", 3}, {"queue", "queue", 0}, {"qeueu", "queue", 2}, {"pps", "top", 3}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestNear: nearest first, prefixes, at most three; DidYouMean quotes them.
func TestNear(t *testing.T) {
	names := []string{"burst", "rate", "rate-limit", "queue", "quiet"}
	for _, c := range []struct {
		name string
		want []string
	}{{"burts", []string{"burst"}}, {"", nil}, {"rat", []string{"rate", "rate-limit"}}, {"QUEUE", []string{"queue"}}, {"xyzzy", nil}} {
		if got := Near(c.name, names); !slices.Equal(got, c.want) {
			t.Errorf("Near(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if got := DidYouMean([]string{"a", "b"}, "--"); got != "; did you mean '--a' or '--b'?" {
		t.Errorf("DidYouMean: %q", got)
	}
	if got := DidYouMean(nil, "--"); got != "" {
		t.Errorf("DidYouMean(nil): %q", got)
	}
}
