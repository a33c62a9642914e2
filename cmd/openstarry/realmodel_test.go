package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
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

// TestModelsDocLlamaServer runs docs/models.md's llama.cpp path as written:
// its llama-server command line (only the model file and the port
// changed) with the tiny model, its local-model template (only the port of
// base_url changed), a task over MQTT; the answer's token count reaches the
// progress topic as the page shows it.
func TestModelsDocLlamaServer(t *testing.T) {
	doc, err := os.ReadFile("../../docs/models.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmdline []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "llama-server ") {
			cmdline = strings.Fields(line)[1:]
		}
	}
	port := ""
	for i := 0; i+1 < len(cmdline); i++ {
		switch cmdline[i] {
		case "-m":
			cmdline[i+1] = "MODEL"
		case "--port":
			port, cmdline[i+1] = cmdline[i+1], "PORT"
		}
	}
	if port == "" || !strings.Contains(strings.Join(cmdline, " "), "-m MODEL") {
		t.Fatalf("no llama-server command line with -m and --port in docs/models.md: %q", cmdline)
	}
	const open, end = "cat > data/templates/local-model.json <<'JSON'\n", "\nJSON\n"
	i := strings.Index(string(doc), open)
	j := strings.Index(string(doc)[i+len(open):], end)
	if i < 0 || j < 0 {
		t.Fatal("no local-model.json in docs/models.md")
	}
	var tmpl map[string]any
	if err := json.Unmarshal(doc[i+len(open):i+len(open)+j], &tmpl); err != nil {
		t.Fatal(err)
	}
	brain := tmpl["brain"].(map[string]any)
	if brain["base_url"] != "http://127.0.0.1:"+port+"/v1" || brain["stream"] != true {
		t.Fatalf("the page's template (%v) does not stream from the port of its llama-server command (%s)", brain, port)
	}

	s := llamaserver.Start(t, llamaserver.Options{Command: cmdline, Model: llamaserver.Model{ContextLength: 8192}})
	brain["base_url"] = s.URL
	data, _ := json.Marshal(tmpl)
	file := filepath.Join(t.TempDir(), "local-model.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "templates", "validate", file); code != 0 {
		t.Fatalf("templates validate: %d\n%s", code, out)
	}
	dir := t.TempDir()
	c := runAgentMQTT(t, "assistant", dir, "--template", file, "--broker-listen", "127.0.0.1:0")
	url := embeddedURL(t, c)
	col := mqtttest.Collect(t, url, "observer-doc", true, "openstarry/#")
	mqtttest.Publish(t, mqttPublisher(t, url), tasksTopic("assistant"), mqttTask("t-1", "Write hello into greeting.txt"))
	wait.For(t, 60*time.Second, "the result", func() bool {
		return len(mqtttest.Results(t, col, resultsTopic("assistant"))["t-1"]) > 0
	})
	if r := mqtttest.Results(t, col, resultsTopic("assistant"))["t-1"][0]; r.Status != "done" || string(r.Output) != `"done"` {
		t.Fatalf("result %+v\n%s", r, c.logs())
	}
	var phases []string
	for _, m := range col.Messages("openstarry/" + mqttDevice + "/agents/assistant/progress") {
		var p struct {
			TaskID  string `json:"task_id"`
			Percent *int   `json:"progress_percent"`
			Phase   string `json:"phase"`
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil || p.TaskID != "t-1" || p.Percent == nil {
			t.Fatalf("progress %s: %v", m.Payload, err)
		}
		phases = append(phases, p.Phase)
		t.Logf("%s %s", m.Topic, m.Payload)
	}
	got := strings.Join(phases, "|")
	t.Logf("progress phases: %s", got)
	if !regexp.MustCompile(`thinking: [0-9]+ tokens\|.*tool:file_append\|.*thinking: [0-9]+ tokens`).MatchString(got) {
		t.Fatalf("progress phases %s: want a token count before and after the tool", got)
	}
}
