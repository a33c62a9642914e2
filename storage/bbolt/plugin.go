package bbolt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "storage.bbolt",
		Description: "one bbolt file per agent (the default store)",
		New:         plugin.StorageOpener(openURL),
	})
}

// openURL opens the store a "bbolt:" URL names:
//
//	bbolt:///abs/dir    an absolute directory
//	bbolt://rel/dir     a directory relative to the working directory
//	bbolt://            {data dir}/agents
//
// Query parameters set Options: max_tasks (an integer) and max_age (a Go
// duration, "168h") bound the task index, lock_timeout (a Go duration) is
// Options.LockTimeout. Any other parameter is an error.
func openURL(_ context.Context, u *url.URL, env plugin.Env) (plugin.Storage, error) {
	dir := plugin.URLPath(u)
	if dir == "" {
		if env.DataDir == "" {
			return nil, errors.New("bbolt: the url names no directory and there is no data directory")
		}
		dir = filepath.Join(env.DataDir, "agents")
	}
	opts := Options{Logger: env.Log}
	for name, values := range u.Query() {
		v := values[len(values)-1]
		var err error
		switch name {
		case "max_tasks":
			opts.Retention.MaxTasks, err = strconv.Atoi(v)
		case "max_age":
			var d time.Duration
			d, err = time.ParseDuration(v)
			opts.Retention.MaxAgeMs = d.Milliseconds()
		case "lock_timeout":
			opts.LockTimeout, err = time.ParseDuration(v)
		default:
			return nil, fmt.Errorf("bbolt: unknown url parameter %q (known: max_tasks, max_age, lock_timeout)", name)
		}
		if err != nil {
			return nil, fmt.Errorf("bbolt: url parameter %s: %w", name, err)
		}
	}
	return Open(dir, opts)
}

// Interface guards.
var (
	_ plugin.Storage   = (*Store)(nil)
	_ plugin.TaskIndex = (*Store)(nil)
	_ plugin.Lister    = (*Store)(nil)
)
