package main

import (
	"strings"
	"testing"
)

// TestRunTokenEnv: `run --token` takes its variable from the key table
// (http.token, OPENSTARRY_HTTP_TOKEN, the daemon's name for the same
// setting); OPENSTARRY_API_TOKEN, its old name, still works, with a
// warning that names the new one. A token too short is refused, which
// shows which variable was read without starting an agent.
func TestRunTokenEnv(t *testing.T) {
	const deprecated = "OPENSTARRY_API_TOKEN is deprecated: set OPENSTARRY_HTTP_TOKEN instead"
	for _, tc := range []struct {
		name    string
		env     []string
		args    []string
		want    string
		warning bool
	}{
		{"key variable", []string{"OPENSTARRY_HTTP_TOKEN=short"}, nil, "--token is too short", false},
		{"old variable", []string{"OPENSTARRY_API_TOKEN=short"}, nil, "--token is too short", true},
		{"key variable wins", []string{"OPENSTARRY_HTTP_TOKEN=short", "OPENSTARRY_API_TOKEN=" + strings.Repeat("x", 16)}, nil, "--token is too short", false},
		{"flag wins", []string{"OPENSTARRY_API_TOKEN=" + strings.Repeat("x", 16)}, []string{"--token", "short"}, "--token is too short", false},
		{"none", nil, nil, "is not a loopback address: set --token (or OPENSTARRY_HTTP_TOKEN)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--agent", "c1", "--no-mqtt", "--listen", "0.0.0.0:0", "--data", t.TempDir(), "--store", "nosuch://x"}, tc.args...)
			env := append([]string{"OPENSTARRY_HTTP_TOKEN=", "OPENSTARRY_API_TOKEN="}, tc.env...)
			out, code := runCLIEnv(t, env, args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want non-zero and %q in:\n%s", code, tc.want, out)
			}
			if strings.Contains(out, deprecated) != tc.warning {
				t.Errorf("warning %q shown: %v, want %v:\n%s", deprecated, !tc.warning, tc.warning, out)
			}
		})
	}
}
