package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/core/logx"
)

// Set by the linker: -X main.version=... -X main.commit=... -X main.date=...
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

// exitCode wraps err so that the process exits with code.
func exitCode(code int, err error) error { return exitcode.New(code, err) }

// globals are the flags every command has, bound to the root command of
// one tree (newRootCmd).
type globals struct {
	logLevel  string
	logFormat string
}

// logger returns the process logger, writing to stderr, at the level and
// in the format of the global flags (or, once a command loaded the
// configuration, of its log.* keys: configFlags.load).
func (g *globals) logger() zerolog.Logger {
	return logx.New(os.Stderr, logx.Options{Level: g.logLevel, Format: g.logFormat})
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// newRootCmd builds the whole command tree, fresh: the root with the global
// flags, and every command with its own. Nothing of it is shared with
// another tree, so a test may build and run as many as it likes.
func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "openstarry",
		Short:         "OpenStarry Edge: a crash-proof agent appliance",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	bindKeyString(pf, &g.logLevel, "log.level", "log level: trace, debug, info, warn, error")
	bindKeyString(pf, &g.logFormat, "log.format", "log format: json or console; default console on a terminal")
	root.AddCommand(
		newStartCmd(g),
		newRunCmd(g),
		newCoreCmd(g),
		newAgentCmd(),
		newStatusCmd(),
		newTaskCmd(),
		newSnapshotCmd(g),
		newTemplatesCmd(),
		newDesignCmd(g),
		newServiceCmd(),
		newBrokerCmd(),
		newEnrollCmd(),
		newHubCmd(g),
		newFleetCmd(),
		newUpdateCmd(g),
		newVerifyReleaseCmd(),
		newSignReleaseCmd(),
		newVersionCmd(),
	)
	root.AddCommand(newSessionCmds()...)
	return root
}

// execute runs the command line args on a new command tree and returns the
// process's exit code.
func execute(args []string) int {
	root := newRootCmd()
	guardGroups(root, args)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "openstarry: %v\n", err)
	return exitcode.Of(err)
}

// guardGroups makes every command that only groups others (root, task,
// approval, service, ...) refuse what is not one of its subcommands: cobra
// itself prints the group's help and exits 0 for "approval aprove 1", so a
// script would think it worked. An unknown subcommand is a usage error
// (exit 2) naming the nearest subcommands; flags after it are not parsed by
// the group, so "task sned --agent x" says the command is unknown, not the
// flag. A group run with nothing prints its help, as before. raw is the
// command line (execute's arguments).
func guardGroups(c *cobra.Command, raw []string) {
	for _, sub := range c.Commands() {
		guardGroups(sub, raw)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		return exitCode(2, unknownCommand(cmd, args[0]))
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		// The group ignored the flags it does not know (so that an
		// unknown command is named first); alone, one is still an error.
		for _, a := range raw {
			if name, ok := unknownFlag(cmd, a); ok {
				return exitCode(2, fmt.Errorf("unknown flag %s for %q, which needs a command: %s", name, cmd.CommandPath(), commandNames(cmd)))
			}
		}
		return cmd.Help()
	}
	c.FParseErrWhitelist.UnknownFlags = true
}

// commandNames lists c's subcommands.
func commandNames(c *cobra.Command) string {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return strings.Join(names, ", ")
}

// unknownFlag reports whether arg is a flag that c does not have.
func unknownFlag(c *cobra.Command, arg string) (string, bool) {
	if arg == "--" || len(arg) < 2 || arg[0] != '-' {
		return "", false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	if name == "" {
		return "", false
	}
	if strings.HasPrefix(arg, "--") {
		if c.Flags().Lookup(name) != nil || c.InheritedFlags().Lookup(name) != nil {
			return "", false
		}
		return "--" + name, true
	}
	sh := name[:1]
	if c.Flags().ShorthandLookup(sh) != nil || c.InheritedFlags().ShorthandLookup(sh) != nil {
		return "", false
	}
	return "-" + sh, true
}

// unknownCommand is the error for a subcommand name that c does not have.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	switch s := c.SuggestionsFor(name); len(s) {
	case 0:
		msg += "; its commands: " + commandNames(c)
	case 1:
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	default:
		msg += "; did you mean one of " + strings.Join(s, ", ") + "?"
	}
	return errors.New(msg)
}
