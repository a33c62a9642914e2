package design

import (
	"errors"
	"strings"
	"testing"
)

// The fields of the openai brain and of model tools validate, and their
// mistakes are reported with path and rule.
func TestModelTemplateFields(t *testing.T) {
	const base = `{"name":"m","version":"1.0.0","role":"worker","system_prompt":"","context_budget":{"max_messages":10},`
	cases := []struct {
		name, body, path, rule string
	}{
		{"full", `"brain":{"provider":"openai","base_url":"http://127.0.0.1:11434/v1","model":"q","api_key_env":"KEY","max_retries":2,"stream":true},
			"tools":["file_read","file_write","http_get"],"unknown_outcome":"approval","http_allowlist":["http://127.0.0.1:8080/api/"],
			"mcp_servers":[{"name":"notes","command":["/usr/bin/notes-mcp","--stdio"],"env":{"NOTES_DIR":"/srv/notes"}},{"name":"web","url":"http://127.0.0.1:9000/mcp","timeout_ms":5000}]}`, "", ""},
		{"bad unknown_outcome", `"brain":{"provider":"echo"},"tools":[],"unknown_outcome":"retry"}`, "/unknown_outcome", "enum"},
		{"http_get without allowlist", `"brain":{"provider":"echo"},"tools":["http_get"]}`, "/tools/0", RuleNoAllowlist},
		{"allowlist not a URL", `"brain":{"provider":"echo"},"tools":["http_get"],"http_allowlist":["ftp://x/"]}`, "/http_allowlist/0", "pattern"},
		{"stream not boolean", `"brain":{"provider":"openai","base_url":"http://h/v1","model":"q","stream":"yes"},"tools":[]}`, "/brain/stream", "type"},
		{"mcp server with command and url", `"brain":{"provider":"echo"},"tools":[],"mcp_servers":[{"name":"a","command":["x"],"url":"http://h/mcp"}]}`, "/mcp_servers/0", RuleMCPServer},
		{"mcp server with neither", `"brain":{"provider":"echo"},"tools":[],"mcp_servers":[{"name":"a"}]}`, "/mcp_servers/0", RuleMCPServer},
		{"mcp servers with one name", `"brain":{"provider":"echo"},"tools":[],"mcp_servers":[{"name":"a","url":"http://h/mcp"},{"name":"a","url":"http://h/mcp"}]}`, "/mcp_servers/1/name", RuleMCPServer},
		{"mcp env not text", `"brain":{"provider":"echo"},"tools":[],"mcp_servers":[{"name":"a","command":["x"],"env":{"K":1}}]}`, "/mcp_servers/0/env/K", "type"},
		{"max_retries zero", `"brain":{"provider":"openai","base_url":"http://h/v1","model":"q","max_retries":0},"tools":[]}`, "/brain/max_retries", "minimum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Validator{}.Validate("m.json", []byte(base+tc.body))
			if tc.rule == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tmpl.UnknownOutcomeOrDefault() != UnknownApproval || !tmpl.Brain.Stream || tmpl.HTTPAllowlist[0] != "http://127.0.0.1:8080/api/" {
					t.Fatalf("decoded %+v", tmpl)
				}
				return
			}
			var errs ValidationErrors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v", err)
			}
			for _, e := range errs {
				if e.Path == tc.path && e.Rule == tc.rule {
					return
				}
			}
			t.Fatalf("no %s error at %s in:\n%v", tc.rule, tc.path, err)
		})
	}
}

func TestUnknownOutcomeDefault(t *testing.T) {
	for provider, want := range map[string]string{"openai": UnknownAskModel, "echo": UnknownEndTask} {
		tmpl := &Template{Brain: Brain{Provider: provider}}
		if got := tmpl.UnknownOutcomeOrDefault(); got != want {
			t.Errorf("%s: %s, want %s", provider, got, want)
		}
	}
	if !strings.Contains(strings.Join(BuiltinTools(), ","), "file_read") {
		t.Error("file_read is not a built-in tool name")
	}
}
