// Package suggest finds, for a mistyped name, the names it was likely
// meant to be ("did you mean"): within an edit distance of 2, a swap of
// two neighbours one edit, or names it starts.
//
// It imports nothing of ours: any package may use it.
package suggest

import "strings"

// DidYouMean is "; did you mean 'X'?" (or "'X' or 'Y'") for suggestions, each
// after prefix ("--" for flags); "" for none. It quotes s's elements in place.
func DidYouMean(s []string, prefix string) string {
	if len(s) == 0 {
		return ""
	}
	for i := range s {
		s[i] = "'" + prefix + s[i] + "'"
	}
	return "; did you mean " + strings.Join(s, " or ") + "?"
}

// Near are the names within edit distance 2 of name (name lowered), or
// that start with it when it is longer than 2 (at most 3, nearest first,
// then in names' order); none for an empty name.
func Near(name string, names []string) []string {
	if name == "" {
		return nil
	}
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, n := range names {
		d := Distance(strings.ToLower(name), n)
		if d <= 2 || len(name) > 2 && strings.HasPrefix(n, name) {
			cs = append(cs, cand{n, d})
		}
	}
	// Stable: nearest first, then names' order.
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].d < cs[j-1].d; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	var out []string
	for i := 0; i < len(cs) && i < 3; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

// Distance is the Damerau-Levenshtein (optimal string alignment)
// distance: a swap of two neighbours ("burts") is one edit.
func Distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
