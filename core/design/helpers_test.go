package design

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
)

// tmpl returns a valid template's JSON; mods edit the document first.
func tmpl(t testing.TB, name, role string, mods ...func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"name":           name,
		"version":        "1.0.0",
		"role":           role,
		"brain":          map[string]any{"provider": "echo"},
		"system_prompt":  "You are " + name + ".",
		"tools":          []any{"file_append", "sleep_ms"},
		"context_budget": map[string]any{"max_messages": 50},
		"limits":         map[string]any{"max_steps": 8},
	}
	for _, mod := range mods {
		mod(m)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func withVersion(v string) func(map[string]any) {
	return func(m map[string]any) { m["version"] = v }
}

func withWorkers(ws ...string) func(map[string]any) {
	return func(m map[string]any) {
		a := make([]any, len(ws))
		for i, w := range ws {
			a[i] = w
		}
		m["workers"] = a
	}
}

// writeFiles writes name → content into dir.
func writeFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// logBuffer is a goroutine-safe buffer for a zerolog.Logger.
type logBuffer struct{ logbuf.Buffer }

// lines returns the decoded log lines at level (all when level is "").
func (b *logBuffer) lines(t testing.TB, level string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if level == "" || m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

func newLogger(b *logBuffer) zerolog.Logger {
	return zerolog.New(b).Level(zerolog.DebugLevel)
}
