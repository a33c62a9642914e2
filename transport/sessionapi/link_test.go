package sessionapi

import (
	"context"
	"errors"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon"
	"github.com/openstarry/openstarry-edge/core/session"
)

// TestLink: the daemon's link opens the registered store in the data
// directory, answers the agents' session tools with the manager's errors
// mapped to HTTP (a bad request 400, an unknown approval 404), refuses an
// unknown tool with daemon.ErrUnknownSessionTool, and an unknown store
// at once.
func TestLink(t *testing.T) {
	if _, err := NewLink("nosuch"); err == nil {
		t.Fatal("NewLink of an unknown store: no error")
	}
	l, err := daemon.LookupSessions("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := l.Open(ctx, daemon.SessionEnv{Data: t.TempDir(), Log: zerolog.Nop()}, session.ReasonCrash)
	if err != nil || n != 0 {
		t.Fatalf("Open = %d, %v", n, err)
	}
	defer l.Close(true)
	for _, tc := range []struct {
		op, body string
		status   int
		code     string
	}{
		{"decision", `{"approval_id": 0}`, 400, session.CodeBadRequest},
		{"decision", `{"approval_id": 7}`, 404, session.CodeNotFound},
		{"approval", `{"bogus": 1}`, 400, session.CodeBadRequest},
	} {
		_, err := l.Tool(ctx, tc.op, "w1", "master", []byte(tc.body))
		if status, code := l.ErrorStatus(err); status != tc.status || code != tc.code {
			t.Errorf("Tool(%s, %s) = %v: %d %s, want %d %s", tc.op, tc.body, err, status, code, tc.status, tc.code)
		}
	}
	if _, err := l.Tool(ctx, "nosuch", "", "master", nil); !errors.Is(err, daemon.ErrUnknownSessionTool) {
		t.Errorf("an unknown tool: %v", err)
	}
}
