package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/logx"
)

// Set by the linker: -X main.version=... -X main.commit=... -X main.date=...
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode wraps err so that the process exits with code.
func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// globals are the flags every command has.
type globals struct {
	logLevel  string
	logFormat string
}

var (
	global  globals
	rootCmd = &cobra.Command{
		Use:           "openstarry",
		Short:         "OpenStarry Edge: a crash-proof agent appliance",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
)

func init() {
	pf := rootCmd.PersistentFlags()
	bindKeyString(pf, &global.logLevel, "log.level", "log level: trace, debug, info, warn, error")
	bindKeyString(pf, &global.logFormat, "log.format", "log format: json or console; default console on a terminal")
}

// logger returns the process logger, writing to stderr.
func logger() zerolog.Logger {
	return logx.New(os.Stderr, logx.Options{Level: global.logLevel, Format: global.logFormat})
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// rawArgs are the command line's arguments (execute's).
var rawArgs []string

func execute(args []string) int {
	rawArgs = args
	guardGroups(rootCmd)
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "openstarry: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// guardGroups makes every command that only groups others (root, task,
// approval, service, ...) refuse what is not one of its subcommands: cobra
// itself prints the group's help and exits 0 for "approval aprove 1", so a
// script would think it worked. An unknown subcommand is a usage error
// (exit 2) naming the nearest subcommands; flags after it are not parsed by
// the group, so "task sned --agent x" says the command is unknown, not the
// flag. A group run with nothing prints its help, as before.
func guardGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		guardGroups(sub)
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
		for _, a := range rawArgs {
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
