package main

// The command line's references, generated from the command tree (the
// same flags, help and defaults the binary has): the man pages
// docs/man/packetshaper*.8 (cobra's doc generator, with the sections a
// daemon's page needs added) and docs/cli.md. TestCLIDocs fails when they
// are stale; regenerate them with
//
//	go generate ./cmd/packetshaper
//
// They are made here, in a test, so that the generator (cobra/doc,
// go-md2man) is not linked into the binary.

//go:generate go test -run ^(TestCLIDocs|TestRulesManPage)$ . -args -update-docs

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md and docs/man/packetshaper*.8 from the command tree")

const (
	manDir = "../../docs/man"
	cliDoc = "../../docs/cli.md"
)

// manExtra are the sections of packetshaper(8) beside the command tree's,
// in md2man's markdown; they go before SEE ALSO.
const manExtra = `# EXIT STATUS
**0**
: after a clean stop (SIGINT, SIGTERM) or a successful replay or check.

**1**
: when a queue cannot be bound or fails, the control socket cannot be asked, or a capture or an output fails (after reporting what was replayed before the damage).

**2**
: for bad usage: an unknown or bad flag, a bad rule file, a wrong argument; the one-line error names it.

# SIGNALS
**SIGINT**, **SIGTERM**: stop reading, give every packet held its verdict (packets shaping holds: accepted at once), answer what is still queued through the rules for up to 0.5 s, accept the rest, log the final stats line, exit 0.

**SIGHUP**: re-read **--policy** FILE. Rules whose name, match, key and limiter settings are unchanged keep their flows and limiter state; changed and new rules start empty. A bad file changes nothing and logs one error. Without **--policy**, SIGHUP is logged and ignored.

# FILES
*/etc/packetshaper/policy.toml*
: the rule file the packaged service reads (**packetshaper.toml**(5)).

*/etc/default/packetshaper*
: the service's QUEUE, RULES_OPTS (for **packetshaper-rules**(8)) and PACKETSHAPER_OPTS.

*/run/packetshaper/packetshaper.sock*
: the control socket of **--queue 0** (packetshaper-N[-M].sock for other queues), which **packetshaper flows** and **packetshaper status** ask; root only, mode 0600.

*/usr/share/doc/packetshaper/*
: the README and the chapters of the documentation (operations, configuration, metrics, shaping, replay).
`

// manSeeAlso are added to every page's SEE ALSO (roff).
const manSeeAlso = `\fBpacketshaper.toml\fP(5), \fBpacketshaper-rules\fP(8), \fBiptables\fP(8), \fBnft\fP(8), \fBtc\fP(8)`

// manHeader is the pages' .TH: each titled by its command (cobra fills in
// PACKETSHAPER-REPLAY from the command path when Title is empty), no date,
// so that the same tree makes the same bytes (the package's changelog
// dates releases).
func manHeader() *doc.GenManHeader {
	zero := time.Time{}
	return &doc.GenManHeader{Section: "8", Source: "packetshaper", Manual: "packetshaper manual", Date: &zero}
}

// genManPages are the man pages of the tree: file name to roff.
func genManPages(t *testing.T) map[string][]byte {
	t.Helper()
	root := newRootCmd(&cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	root.DisableAutoGenTag = true
	dir := t.TempDir()
	if err := doc.GenManTreeFromOpts(root, doc.GenManTreeOptions{Header: manHeader(), Path: dir, CommandSeparator: "-"}); err != nil {
		t.Fatal(err)
	}
	pages := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		pages[e.Name()] = fixMan(b, e.Name() == "packetshaper.8")
	}
	return pages
}

// fixMan edits cobra's page: no date (the zero time's "Jan 0001"), EXAMPLES
// (man-pages(7)'s name), the extra sections and the project's pages in SEE
// ALSO.
func fixMan(b []byte, root bool) []byte {
	s := string(b)
	s = strings.Replace(s, `"Jan 0001"`, `""`, 1)
	s = strings.Replace(s, "\n.SH EXAMPLE\n", "\n.SH EXAMPLES\n", 1)
	extra := ""
	if root {
		// md2man renders a document: its first heading is the title.
		extra = string(md2man.Render([]byte(manExtra)))
		extra = strings.TrimPrefix(strings.TrimLeft(extra, "\n"), ".nh\n")
		extra = strings.Replace(extra, ".TH ", ".SH ", 1)
	}
	if i := strings.Index(s, "\n.SH SEE ALSO\n"); i >= 0 {
		s = s[:i+1] + extra + strings.TrimRight(s[i+1:], "\n") + ", " + manSeeAlso + "\n"
	} else {
		s += extra + ".SH SEE ALSO\n" + manSeeAlso + "\n"
	}
	// Blank lines are vertical space in roff; a hyphen is \- in an
	// option (man-pages(7): so that it can be searched and copied).
	lines := strings.Split(s, "\n")
	out := lines[:0]
	for _, l := range lines {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, ".") {
			l = strings.ReplaceAll(l, "--", `\-\-`)
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// cliIntro is docs/cli.md's hand-written part.
const cliIntro = "# Command line\n\n" +
	"<!-- Generated by go generate ./cmd/packetshaper (TestCLIDocs) from the command tree: do not edit. -->\n\n" +
	"`packetshaper` is one binary: without a subcommand it is the live shaper,\n" +
	"and its subcommands replay captures, check rule files and ask the running\n" +
	"shaper. Every flag of every command is below, as `--help` prints it; the\n" +
	"man pages (`man packetshaper`, generated from the same tree) say the same.\n" +
	"The limiter flags are the fields of the one rule the command line makes\n" +
	"without `--policy` ([Rule file reference](configuration-reference.md)).\n" +
	"`packetshaper-rules` (scripts/rules.sh) diverts the packets:\n" +
	"[Diverting packets](operations.md#diverting-packets). Exit status:\n" +
	"[Operations](operations.md#exit-status). Long flags take two dashes.\n" +
	"Shell completions: `packetshaper completion bash|zsh|fish` (the package\n" +
	"installs them).\n"

// genCLIReference is docs/cli.md.
func genCLIReference() []byte {
	root := newRootCmd(&cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	var b bytes.Buffer
	b.WriteString(cliIntro)
	b.WriteString("\n| command | what |\n|---|---|\n")
	cmds := allCommands(root)
	for _, c := range cmds {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", mdCell(c.UseLine()), slug(c.CommandPath()), mdCell(c.Short))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## %s\n\n", c.CommandPath())
		fmt.Fprintf(&b, "`%s`\n\n", c.UseLine())
		long := c.Long
		if long == "" {
			long = c.Short
		}
		b.WriteString(strings.TrimSpace(long) + "\n")
		if c.Example != "" {
			fmt.Fprintf(&b, "\n```\n%s\n```\n", strings.TrimRight(c.Example, "\n"))
		}
		for _, g := range clihelp.FlagGroups {
			var rows []*pflag.Flag
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				gs := f.Annotations["group"]
				if !f.Hidden && (len(gs) == 1 && gs[0] == g.ID || len(gs) == 0 && g.ID == "") {
					rows = append(rows, f)
				}
			})
			if len(rows) == 0 {
				continue
			}
			title := g.Title
			if g.ID == "" {
				title = strings.TrimPrefix(c.CommandPath()+" ", "packetshaper ") + "flags"
				if c == root {
					title = "live flags"
				}
				title = strings.ToUpper(title[:1]) + title[1:]
			}
			fmt.Fprintf(&b, "\n### %s\n\n| flag | default | meaning |\n|---|---|---|\n", title)
			for _, f := range rows {
				name, usage := pflag.UnquoteUsage(f)
				arg := ""
				if name != "" {
					arg = " " + name
				}
				def := "—"
				if f.DefValue != "" && !(f.Value.Type() == "bool" && f.DefValue == "false") {
					def = "`" + f.DefValue + "`"
				}
				fmt.Fprintf(&b, "| `--%s%s` | %s | %s |\n", f.Name, arg, def, mdCell(usage))
			}
		}
	}
	return b.Bytes()
}

// allCommands are c and the commands under it, depth first, without the
// hidden ones and help.
func allCommands(c *cobra.Command) []*cobra.Command {
	if c.Hidden || c.Name() == "help" {
		return nil
	}
	cmds := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		cmds = append(cmds, allCommands(sub)...)
	}
	return cmds
}

// mdCell keeps a table cell in its cell.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// slug is GitHub's anchor of a heading.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// commandPages are the pages in docs/man of the command tree (not
// packetshaper-rules.8, TestRulesManPage's).
func commandPages() []string {
	pages, _ := filepath.Glob(filepath.Join(manDir, "packetshaper*.8"))
	return slices.DeleteFunc(pages, func(p string) bool { return filepath.Base(p) == "packetshaper-rules.8" })
}

// TestCLIDocs: docs/cli.md and docs/man/packetshaper*.8 are what the
// command tree generates (-update-docs rewrites them), and every flag of
// every command is in both.
func TestCLIDocs(t *testing.T) {
	want := map[string][]byte{cliDoc: genCLIReference()}
	for name, b := range genManPages(t) {
		want[filepath.Join(manDir, name)] = b
	}
	if *updateDocs {
		for _, p := range commandPages() {
			if _, ok := want[p]; !ok {
				os.Remove(p)
			}
		}
		if err := os.MkdirAll(manDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for p, b := range want {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	stale := false
	for p, b := range want {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s is stale (or missing: %v)", p, err)
			stale = true
		}
	}
	for _, p := range commandPages() {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: no such command any more", p)
			stale = true
		}
	}
	if stale {
		t.Errorf("regenerate: go generate ./cmd/packetshaper")
	}
	// Every flag of every command, in both.
	root := newRootCmd(&cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	for _, c := range allCommands(root) {
		page := want[filepath.Join(manDir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".8")]
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !bytes.Contains(want[cliDoc], []byte("`--"+f.Name)) {
				t.Errorf("docs/cli.md: %s has no --%s", c.CommandPath(), f.Name)
			}
			if !bytes.Contains(page, []byte(`\-\-`+f.Name)) {
				t.Errorf("man page of %s has no --%s", c.CommandPath(), f.Name)
			}
		})
	}
	for _, sec := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "SIGNALS", "FILES", "EXAMPLES", "SEE ALSO"} {
		if !bytes.Contains(want[filepath.Join(manDir, "packetshaper.8")], []byte("\n.SH "+sec+"\n")) {
			t.Errorf("packetshaper.8 has no %s section", sec)
		}
	}
}

// TestManPagesRender: man renders every page in docs/man without a
// warning (needs man-db's man; skipped without it).
func TestManPagesRender(t *testing.T) {
	manBin, err := exec.LookPath("man")
	if err != nil {
		t.Skip("no man command (apt-get install man-db)")
	}
	pages, _ := filepath.Glob(filepath.Join(manDir, "*.[158]"))
	if len(pages) == 0 {
		t.Fatal("no pages in docs/man")
	}
	for _, p := range pages {
		cmd := exec.Command(manBin, "--warnings", "-l", p)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=", "PAGER=cat", "MANPAGER=cat")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() != 0 || stdout.Len() < 200 {
			t.Errorf("man -l %s: %v, %d bytes, warnings:\n%s", p, err, stdout.Len(), stderr.String())
		}
	}
}

// TestManTitles: each man page's .TH is its own command ("packetshaper
// replay" is PACKETSHAPER-REPLAY(8), not PACKETSHAPER(8)).
func TestManTitles(t *testing.T) {
	for name, b := range genManPages(t) {
		want := ".TH \"" + strings.ToUpper(strings.TrimSuffix(name, ".8")) + "\" \"8\""
		if !strings.Contains(string(b), want+" ") {
			t.Errorf("%s: no %s", name, want)
		}
	}
}
