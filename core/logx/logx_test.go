package logx

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleDropsRepeatedValues: a console line does not say a value
// twice (once in its message, once as a field); JSON keeps every field.
func TestConsoleDropsRepeatedValues(t *testing.T) {
	for _, tc := range []struct {
		name, json, want, notWant string
	}{
		{"address", `{"level":"info","addr":"http://127.0.0.1:7777","message":"daemon listening on http://127.0.0.1:7777"}`,
			"daemon listening on http://127.0.0.1:7777", "addr="},
		{"agent in the message", `{"level":"info","agent":"master","pid":4,"message":"agent master online"}`,
			"pid=4", "agent=master"},
		{"inside a longer word it stays", `{"level":"info","agent":"mast","message":"agent master online"}`,
			"agent=mast", ""},
		{"short values stay", `{"level":"info","n":"1","message":"1 task"}`, "n=1", ""},
		{"errors stay", `{"level":"error","error":"disk full","message":"save failed: disk full"}`, "error=\"disk full\"", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if _, err := Writer(&b, "console").Write([]byte(tc.json + "\n")); err != nil {
				t.Fatal(err)
			}
			got := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(b.String(), "")
			if !strings.Contains(got, tc.want) || tc.notWant != "" && strings.Contains(got, tc.notWant) {
				t.Fatalf("console line %q, want %q without %q", got, tc.want, tc.notWant)
			}
		})
	}
	var b bytes.Buffer
	line := `{"level":"info","addr":"x:1","message":"listening on x:1"}` + "\n"
	_, _ = Writer(&b, "json").Write([]byte(line))
	if b.String() != line {
		t.Fatalf("JSON changed: %q", b.String())
	}
}
