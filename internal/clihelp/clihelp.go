// Package clihelp is the help of packetshaper's command tree
// (github.com/spf13/cobra): --help and usage with the flags in their
// groups, and the flags a mistyped one was likely meant to be.
package clihelp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/packetshaper/packetshaper/internal/suggest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Templates gives root (and the commands under it) the help and usage
// templates.
func Templates(root *cobra.Command) {
	cobra.AddTemplateFunc("flagGroups", flagGroups)
	cobra.AddTemplateFunc("sentence", sentence)
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate(helpTemplate)
}

// SuggestFlags are cmd's visible flags near name (suggest.Near), or name
// itself if it is one.
func SuggestFlags(cmd *cobra.Command, name string) []string {
	if f := cmd.Flags().Lookup(name); name != "" && f != nil && !f.Hidden {
		return []string{name}
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	return suggest.Near(name, names)
}

// FlagGroup is a group of flags in help: its ID (a flag's "group"
// annotation, "" for the command's own) and its title.
type FlagGroup struct{ ID, Title string }

// FlagGroups: a flag's group is its "group" annotation; help (and the
// generated CLI reference) lists the groups in this order, each under its
// title.
var FlagGroups = []FlagGroup{
	{"", "Flags"},
	{GroupPolicy, "Policy flags"},
	{GroupLimiter, "Limiter flags (one rule matching every packet, without --policy)"},
}

// The flag groups beside the command's own.
const (
	GroupPolicy  = "policy"
	GroupLimiter = "limiter"
)

// AddGroup adds src's flags to dst in group ("": the command's own).
func AddGroup(dst *pflag.FlagSet, group string, src *pflag.FlagSet) {
	src.VisitAll(func(f *pflag.Flag) {
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations["group"] = []string{group}
		dst.AddFlag(f)
	})
}

// flagGroups is the "Flags:" part of a command's help, group by group.
func flagGroups(cmd *cobra.Command) string {
	var b strings.Builder
	for _, g := range FlagGroups {
		fs := pflag.NewFlagSet(g.ID, pflag.ContinueOnError)
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if gs := f.Annotations["group"]; len(gs) == 1 && gs[0] == g.ID || len(gs) == 0 && g.ID == "" {
				fs.AddFlag(f)
			}
		})
		if !fs.HasAvailableFlags() {
			continue
		}
		fmt.Fprintf(&b, "\n\n%s:\n%s", g.Title, strings.TrimRight(fs.FlagUsages(), " \n"))
	}
	return b.String()
}

// usageHead is the usage lines of a command's help and usage.
const usageHead = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}`

// helpTemplate is every command's --help: the usage lines, what the
// command does in one sentence (its Short), the examples, commands and
// flags, then the long description.
const helpTemplate = usageHead + `

{{sentence .Short}}` + usageRest + `{{with .Long}}
Description:
{{.}}
{{end}}`

// usageTemplate is cobra's, with the flags in their groups.
const usageTemplate = usageHead + usageRest

// usageRest is the usage after its first lines.
const usageRest = `{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}{{flagGroups .}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

// sentence makes a command's Short a sentence: "Replay pcap ... input)."
func sentence(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// FlagError is the one line of a flag error err of cmd (its FlagErrorFunc's),
// args the command line: naming the flag, with a did-you-mean over the
// command's flags, and where help is.
func FlagError(cmd *cobra.Command, err error, args []string) string {
	msg := err.Error()
	var notExist *pflag.NotExistError
	if errors.As(err, &notExist) {
		name := notExist.GetSpecifiedName()
		if short := notExist.GetSpecifiedShortnames(); short != "" {
			// -queue: a long flag with one dash (package flag took
			// those). The argument as given: pflag names only what
			// is left of it after known shorthands (-help: "elp").
			name = short
			for _, a := range args {
				if len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.HasSuffix(a, short) {
					name, _, _ = strings.Cut(a[1:], "=")
					break
				}
			}
			msg = fmt.Sprintf("unknown flag -%s (long flags take two dashes)", name)
		}
		msg += suggest.DidYouMean(SuggestFlags(cmd, name), "--")
	}
	return msg + SeeHelp(cmd)
}

// SeeHelp is where a usage error of cmd points to.
func SeeHelp(cmd *cobra.Command) string {
	return " (see '" + cmd.CommandPath() + " --help')"
}

// SettingArgs is the command line that does what fs (parsed) sets, the
// flags named in outputs left out, flags in name order, then files:
// replay's report shows it as its "command", the same whatever the
// outputs' names.
func SettingArgs(fs *pflag.FlagSet, outputs map[string]bool, files []string) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if outputs[f.Name] {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			args = append(args, "--"+f.Name+"="+f.Value.String())
			return
		}
		args = append(args, "--"+f.Name, f.Value.String())
	})
	return append(args, files...)
}
