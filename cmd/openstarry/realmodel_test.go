package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// realModelTemplate writes the shipped local-model template pointing at a
// llama-server of internal/llamaserver.
func realModelTemplate(t *testing.T, s *llamaserver.Server) string {
	t.Helper()
	var tmpl map[string]any
	if err := json.Unmarshal(mustShipped(t, "local-model"), &tmpl); err != nil {
		t.Fatal(err)
	}
	b := tmpl["brain"].(map[string]any)
	b["base_url"], b["model"] = s.URL, "tiny"
	data, _ := json.Marshal(tmpl)
	file := filepath.Join(t.TempDir(), "local-model.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// SIGKILL of the real binary while llama-server generates the answer that
// follows a non-idempotent tool's result: after the restart that step is
// asked again (the server sees a third request, not a fourth) and the
// task completes; the tool's line is in the file once, and the first
// question is not asked again.
func TestRealModelAgentKilledDuringGeneration(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Predict: 3000})
	file := realModelTemplate(t, s)
	data := t.TempDir()
	args := []string{"run", "--agent", "m1", "--template", file, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt"}
	c := startChild(t, true, args...)
	code, body, err := postTask(context.Background(), c.url(), "m1",
		[]byte(`{"task_id":"k1","input":"write hello `+llamaserver.SlowWord+`"}`))
	if err != nil || (code != 200 && code != 202) {
		t.Fatalf("post: %d %s %v", code, body, err)
	}
	notes := filepath.Join(host.ArtifactsDir(data, "m1"), "notes.txt")
	wait.For(t, 30*time.Second, "file_append to run and the model to generate the next answer", func() bool {
		busy, _ := s.Generating(context.Background())
		b, _ := os.ReadFile(notes)
		return busy && string(b) == "hello\n"
	})
	c.kill()

	c = startChild(t, true, args...)
	st := waitTask(t, c.url(), "m1", "k1")
	if st.Status != "done" || !strings.HasPrefix(string(st.Output), `"lalala`) {
		t.Fatalf("result = %+v\n%s", st, c.logs())
	}
	if got := countLines(t, notes); len(got) != 1 || got["hello"] != 1 {
		t.Fatalf("notes.txt lines = %v, want hello once", got)
	}
	if n := strings.Count(s.Log(), "processing task"); n != 3 {
		t.Fatalf("llama-server processed %d requests, want 3 (the call, the answer cut by the kill, the answer again)\n%s", n, s.Log())
	}
}
