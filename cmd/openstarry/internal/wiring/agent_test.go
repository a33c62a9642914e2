package wiring

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	_ "github.com/openstarry/openstarry-edge/storage/bbolt" // the default store, as the binary links it
)

// TestRunAgentInProcess: the wiring of an agent process runs in the test's
// own process, on a real bbolt file: a task over HTTP is answered, and the
// agent's state is on disk after it stopped.
func TestRunAgentInProcess(t *testing.T) {
	cfg := config.Default()
	cfg.Data = t.TempDir()
	cfg.MQTT.Disabled = true
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- RunAgent(ctx, Agent{ID: "a1", Template: "echo", Listen: "127.0.0.1:0", Config: cfg, Version: "test", Log: zerolog.New(&logs)})
	}()
	listening := regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	var base string
	wait.Until(t, time.Minute, "the agent's HTTP listener", func() error {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\n%s", err, logs.String())
		default:
		}
		m := listening.FindStringSubmatch(logs.String())
		if m == nil {
			return errors.New("no listening line yet")
		}
		base = m[1]
		return nil
	})
	resp, err := http.Post(base+"/agents/a1/tasks?wait=30s", "application/json", strings.NewReader(`{"task_id":"t1","input":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"output":"hello"`) || !strings.Contains(string(body), `"status":"done"`) {
		t.Fatalf("task: %s %s", resp.Status, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the agent's stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop within a minute of its context's end")
	}
	if _, err := os.Stat(filepath.Join(cfg.Data, "agents", "a1", "state.db")); err != nil {
		t.Errorf("the agent's store: %v", err)
	}
}
