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
		return zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, FormatPrepare: dropRepeated}
	}
	return w
}

// dropRepeated leaves out of a console line the fields whose value its
// message already says ("daemon listening on X" needs no addr=X after it).
// JSON lines keep every field: programs read them by name.
func dropRepeated(evt map[string]any) error {
	msg, _ := evt[zerolog.MessageFieldName].(string)
	if msg == "" {
		return nil
	}
	for k, v := range evt {
		switch k {
		case zerolog.MessageFieldName, zerolog.LevelFieldName, zerolog.TimestampFieldName, zerolog.ErrorFieldName, zerolog.CallerFieldName:
			continue
		}
		if s, ok := v.(string); ok && len(s) >= 3 && containsWord(msg, s) {
			delete(evt, k)
		}
	}
	return nil
}

// containsWord reports whether s is in msg as a whole: not inside a longer
// word ("master" is in "agent master online", not in "masterful").
func containsWord(msg, s string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], s)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(s)
		if (start == 0 || !wordByte(msg[start-1])) && (end == len(msg) || !wordByte(msg[end])) {
			return true
		}
		i = start + 1
	}
}

func wordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
