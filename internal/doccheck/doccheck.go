// Package doccheck checks the project's markdown documentation: every
// relative link in README.md, CONTRIBUTING.md and docs/*.md must name a
// file that exists and, with a #fragment, a heading of that file (GitHub's
// anchors). It has no code of its own beyond the test's helpers.
package doccheck
