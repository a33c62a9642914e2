package tool

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheckArgs(t *testing.T) {
	appendT, _ := Lookup("file_append")
	sleepT, _ := Lookup("sleep_ms")
	for _, tc := range []struct {
		name string
		t    Tool
		args string
		want string // "" for valid; else substrings of the error, |-separated
	}{
		{"valid", appendT, `{"file":"a.txt","line":"x"}`, ""},
		{"missing line", appendT, `{"file":"a.txt"}`, "bad arguments: /line: missing required field"},
		{"both missing", appendT, `{}`, "/file: missing required field|/line: missing required field"},
		{"absent args", appendT, ``, "/file: missing required field"},
		{"unknown field", appendT, `{"file":"a","line":"b","mode":"x"}`, "/mode: unknown field"},
		{"wrong type", appendT, `{"file":"a","line":7}`, "/line: got number, want string"},
		{"above maximum", sleepT, `{"ms":999999}`, "/ms: maximum"},
		{"not an integer", sleepT, `{"ms":1.5}`, "/ms:"},
		{"no schema", Tool{Name: "free"}, `{"anything":1}`, ""},
		{"schema that does not compile", Tool{Name: "bad", Parameters: json.RawMessage(`{"type":"nonsense"}`)}, `{}`, ""},
		{"schema that is not JSON", Tool{Name: "bad2", Parameters: json.RawMessage(`{`)}, `{}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.t.CheckArgs(json.RawMessage(tc.args))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %s", tc.args)
			}
			for _, w := range strings.Split(tc.want, "|") {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}
