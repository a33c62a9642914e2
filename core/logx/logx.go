// Package logx builds the zerolog loggers of the binary: JSON lines for
// journals and pipes, the console format when stderr is a terminal.
package logx

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Options select the format and level.
type Options struct {
	Level  string // trace, debug, info, warn, error; default info
	Format string // "json", "console" or "" (console on a terminal, JSON otherwise)
}

// New returns a logger writing to w.
func New(w io.Writer, o Options) zerolog.Logger {
	w = Writer(w, o.Format)
	lvl, err := zerolog.ParseLevel(strings.ToLower(o.Level))
	if err != nil || o.Level == "" {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// Writer returns what writes JSON log lines to w in format ("json",
// "console", or "" for console on a terminal and JSON otherwise): w itself,
// or a console writer in front of it. The daemon passes its agents' JSON
// lines through it, so that they read like its own.
func Writer(w io.Writer, format string) io.Writer {
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
			format = "console"
		}
	}
	if format == "console" {
		return zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return w
}
