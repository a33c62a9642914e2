package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/rs/zerolog"
)

// SlogHandler is a log/slog Handler that writes each record to a zerolog
// Logger: mochi logs through slog, the rest of the binary through zerolog,
// and an operator reads one stream. Levels map one to one (slog Debug,
// Info, Warn, Error to zerolog's), attributes become fields, groups prefix
// their attributes' keys with "group.".
type SlogHandler struct {
	log    zerolog.Logger
	attrs  []slog.Attr // from WithAttrs, already qualified by their group
	prefix string      // "a.b." from WithGroup
	// Demote, when set, is asked about every record; true writes it at
	// debug level (for a library's chatter or its known false alarms).
	Demote func(r slog.Record) bool
}

// NewSlogHandler returns a handler writing to log.
func NewSlogHandler(log zerolog.Logger) *SlogHandler {
	return &SlogHandler{log: log}
}

// NewSlogLogger returns a *slog.Logger writing to log.
func NewSlogLogger(log zerolog.Logger) *slog.Logger {
	return slog.New(NewSlogHandler(log))
}

func zlevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	default:
		return zerolog.DebugLevel
	}
}

// Enabled reports whether the zerolog logger writes at level l. Demote
// can only lower a record's level, so a record is wanted when its own
// level is: Handle drops it if it is demoted below the logger's level.
func (h *SlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	zl := zlevel(l)
	return zl >= h.log.GetLevel() && zl >= zerolog.GlobalLevel()
}

// Handle writes one record.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	lvl := zlevel(r.Level)
	if h.Demote != nil && h.Demote(r) {
		lvl = zerolog.DebugLevel
	}
	if lvl < h.log.GetLevel() || lvl < zerolog.GlobalLevel() {
		return nil
	}
	ev := h.log.WithLevel(lvl)
	if ev == nil {
		return nil
	}
	for _, a := range h.attrs {
		addAttr(ev, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(ev, h.prefix, a)
		return true
	})
	ev.Msg(r.Message)
	return nil
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *SlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		a.Key = h.prefix + a.Key
		c.attrs = append(c.attrs, a)
	}
	return &c
}

// WithGroup returns a handler whose later attributes are qualified by name.
func (h *SlogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// maxAttrBytes bounds one attribute of a bridged record.
const maxAttrBytes = 1024

func addAttr(ev *zerolog.Event, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	key := prefix + a.Key
	if key == "" {
		key = "attr"
	}
	v := a.Value
	switch v.Kind() {
	case slog.KindGroup:
		p := key + "."
		if a.Key == "" {
			p = prefix
		}
		for _, g := range v.Group() {
			addAttr(ev, p, g)
		}
	case slog.KindString:
		ev.Str(key, v.String())
	case slog.KindInt64:
		ev.Int64(key, v.Int64())
	case slog.KindUint64:
		ev.Uint64(key, v.Uint64())
	case slog.KindFloat64:
		ev.Float64(key, v.Float64())
	case slog.KindBool:
		ev.Bool(key, v.Bool())
	case slog.KindDuration:
		ev.Dur(key, v.Duration())
	case slog.KindTime:
		ev.Time(key, v.Time())
	default:
		switch x := v.Any().(type) {
		case error:
			if strings.EqualFold(key, "error") || key == "err" {
				ev.AnErr(zerolog.ErrorFieldName, x)
			} else {
				ev.AnErr(key, x)
			}
		case interface{ String() string }:
			ev.Str(key, x.String())
		default:
			// Mochi logs whole packets; keep a line readable.
			b, err := json.Marshal(x)
			switch {
			case err != nil:
				ev.Str(key, fmt.Sprintf("%v", x))
			case len(b) > maxAttrBytes:
				ev.Str(key, string(b[:maxAttrBytes])+"…")
			default:
				ev.RawJSON(key, b)
			}
		}
	}
}

// Interface guard.
var _ slog.Handler = (*SlogHandler)(nil)
