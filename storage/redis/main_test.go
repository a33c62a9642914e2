package redis

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// quiet drops go-redis's own log lines ("failed to dial after 5 attempts"),
// which the tests that stop the server provoke on purpose; the errors they
// check carry the same news.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(quiet{})
	os.Exit(m.Run())
}
