package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/packetshaper/packetshaper/internal/clihelp"
	"github.com/packetshaper/packetshaper/internal/suggest"
	"github.com/spf13/cobra"
)

// The command tree (github.com/spf13/cobra): the root command is the live
// shaper, the subcommands are in subcommands. A subcommand is one
// constructor, func(*cli) *cobra.Command, in one file, added to that list;
// its RunE returns c.exit(code) after printing its own errors.

// subcommands are the root's subcommands, in help order (cobra adds help
// and completion).
var subcommands = []func(*cli) *cobra.Command{
	newReplayCmd,
	newCheckCmd,
	newFlowsCmd,
	newStatusCmd,
	newTopCmd,
	newDivertCmd,
	newVersionCmd,
}

// cli is what every command writes to.
type cli struct {
	stdout, stderr io.Writer
	// args is the command line, for the flag errors.
	args []string
}

// exitCode is a command's exit status once it has said why.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exit turns a command's exit status into RunE's error.
func (c *cli) exit(code int) error {
	if code == 0 {
		return nil
	}
	return exitCode(code)
}

// usageError is bad usage caught by cobra or pflag: one line, exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// run runs the command line args: the process's exit status.
func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, args: args}
	root := newRootCmd(c)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return int(ec)
	}
	var ue *usageError
	if !errors.As(err, &ue) {
		// cobra's own usage errors (argument counts, an unknown
		// help topic): one line as well.
		ue = &usageError{oneLine(err.Error()) + clihelp.SeeHelp(cmd)}
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), ue.msg)
	return 2
}

// newRootCmd is the whole command tree; its own Run is the live shaper.
func newRootCmd(c *cli) *cobra.Command {
	root := newLiveCmd(c)
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	// --version (cobra's, defined here without its -v shorthand).
	root.Flags().Bool("version", false, "print the version and commit, and exit")
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(c.flagParseError)
	root.SuggestionsMinimumDistance = 2
	root.CompletionOptions.HiddenDefaultCmd = false
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return &usageError{fmt.Sprintf("unknown command %q%s%s", args[0], suggest.DidYouMean(s, ""), clihelp.SeeHelp(cmd))}
		}
		return &usageError{fmt.Sprintf("unexpected argument %q: not a command%s", args[0], clihelp.SeeHelp(cmd))}
	}
	clihelp.Templates(root)
	for _, sub := range subcommands {
		root.AddCommand(sub(c))
	}
	// cobra's completion command (bash, zsh, fish, powershell), in the
	// tree now rather than at Execute, so that the references list it.
	root.InitDefaultCompletionCmd()
	return root
}

// flagParseError is every command's FlagErrorFunc: one line naming the
// flag, with a did-you-mean (clihelp.FlagError).
func (c *cli) flagParseError(cmd *cobra.Command, err error) error {
	return &usageError{clihelp.FlagError(cmd, err, c.args)}
}

// noArgs is Args for commands without arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q%s", args[0], clihelp.SeeHelp(cmd))}
	}
	return nil
}
