package sessionapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/storage/sessionfiles"
	"github.com/openstarry/openstarry-edge/storage/sessionsql"
)

// openManager opens a manager on the real store in data, closed at the
// end of the test.
func openManager(t *testing.T, data string, logs *logbuf.Buffer) *session.Manager {
	t.Helper()
	open := func(ctx context.Context, path string) (session.Store, error) {
		st, err := sessionsql.OpenStore(ctx, path)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	m, err := session.Open(context.Background(), session.Options{Data: data, Log: zerolog.New(logs), OpenStore: open,
		PollInterval: 5 * time.Millisecond, CheckpointInterval: 20 * time.Millisecond, OpenBackup: sessionfiles.Open})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(false) })
	return m
}

// plan decodes a project's plan.
func plan(t *testing.T, body string) *session.CreateRequest {
	t.Helper()
	req, err := session.DecodeCreateRequest(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}
