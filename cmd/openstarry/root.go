package main

import (
	"errors"
	"fmt"
	"os"

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

func execute(args []string) int {
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
