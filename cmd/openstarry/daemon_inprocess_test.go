//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/wiring"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestRunDaemonInProcess: the daemon's whole wiring (wiring.RunDaemon, what
// `openstarry start` runs) runs in the test's own process, its agents
// processes of the built binary: it boots, a task through its HTTP
// listener is answered by the master, and it stops, agents and all, when
// its context ends.
func TestRunDaemonInProcess(t *testing.T) {
	data := dataDir(t)
	cfg, err := config.Load(daemonConfig(t, data, ""), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- wiring.RunDaemon(ctx, wiring.Options{Config: cfg, Log: zerolog.New(&logs), ChildLog: &logs,
			Self: selfInfo(), Executable: binPath})
	}()
	listening := regexp.MustCompile(`daemon listening on (http://[0-9.:]+)`)
	var base string
	wait.Until(t, time.Minute, "the daemon's boot", func() error {
		select {
		case err := <-done:
			t.Fatalf("the daemon stopped: %v\n%s", err, logs.String())
		default:
		}
		m := listening.FindStringSubmatch(logs.String())
		if m == nil || !strings.Contains(logs.String(), "boot complete") {
			return errors.New("not booted yet")
		}
		base = m[1]
		return nil
	})
	resp, err := httpc.Post(base+"/agents/master/tasks?wait=30s", "application/json", strings.NewReader(`{"task_id":"ip1","input":"in process"}`))
	if err != nil {
		t.Fatal(err)
	}
	var st taskState
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || st.Status != "done" || string(st.Output) != `"in process"` {
		t.Fatalf("POST ?wait to the in-process daemon: %d %+v %v\n%s", resp.StatusCode, st, err, logs.String())
	}
	pid := daemonStatus(t, data).Agents[0].PID
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the daemon's stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the daemon did not stop within a minute of its context's end\n%s", logs.String())
	}
	if !pidGone(pid) {
		t.Errorf("the agent (pid %d) outlived its daemon", pid)
	}
}
