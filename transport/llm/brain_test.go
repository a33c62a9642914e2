package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/transport/llm"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
)

func td(name string) llmtest.Answer { return llmtest.Answer{File: filepath.Join("testdata", name)} }

// rig is one agent with the openai brain on a real bbolt store.
type rig struct {
	t     testing.TB
	dir   string
	store *bbolt.Store
	rt    *agent.Runtime
	tmpl  *design.Template
	a     host.Agent
	log   logbuf.Buffer // what the agent logged, across restarts
}

func (r *rig) logs() string { return r.log.String() }

// recordPhases makes r's agent keep the progress phases it reports; the
// function returned gives them so far, joined by "|".
func (r *rig) recordPhases() func() string {
	var mu sync.Mutex
	var phases []string
	r.a = host.Agent{ID: "m1", Template: r.tmpl, DataDir: r.dir, OnProgress: func(task string, pct int, phase string) {
		mu.Lock()
		phases = append(phases, phase)
		mu.Unlock()
	}}
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(phases, "|")
	}
}

func template(baseURL string) *design.Template {
	return &design.Template{Name: "model", Version: "1.0.0", Role: design.RoleWorker,
		Brain:        design.Brain{Provider: "openai", BaseURL: baseURL, Model: "qwen2.5:0.5b", TimeoutMs: 5000},
		SystemPrompt: "You are a test agent.", Tools: []string{"file_append", "file_read", "file_write", "sleep_ms"},
		ContextBudget: design.ContextBudget{MaxMessages: 50}}
}

func newRig(t testing.TB, tmpl *design.Template) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), tmpl: tmpl}
	r.open()
	return r
}

func (r *rig) open() {
	r.t.Helper()
	st, err := bbolt.Open(filepath.Join(r.dir, "agents"), bbolt.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.store = st
	if r.a.ID == "" {
		r.a = host.Agent{ID: "m1", Template: r.tmpl, DataDir: r.dir,
			RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	}
	r.a.Store = st
	var out io.Writer = zerolog.NewTestWriter(r.t)
	if _, bench := r.t.(*testing.B); bench {
		out = io.Discard
	}
	r.a.Log = zerolog.New(io.MultiWriter(out, &r.log))
	rt, err := host.Start(context.Background(), r.a)
	if err != nil {
		r.t.Fatal(err)
	}
	r.rt = rt
	r.t.Cleanup(r.close)
}

func (r *rig) close() {
	if r.rt != nil {
		_ = r.rt.Stop(context.Background())
		r.rt = nil
	}
	if r.store != nil {
		_ = r.store.Close()
		r.store = nil
	}
}

func (r *rig) submit(id string, input any) {
	r.t.Helper()
	in, _ := json.Marshal(input)
	ev, err := agent.TaskEvent(&agent.Task{TaskID: id, Input: in}, "test", time.Now().UnixMilli())
	if err != nil {
		r.t.Fatal(err)
	}
	if res := r.rt.Submit(context.Background(), ev); res.Err != nil {
		r.t.Fatal(res.Err)
	}
}

func (r *rig) wait(id string) agent.TaskState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, ok, err := r.rt.WaitTask(ctx, id)
	if err != nil || !ok || !st.Final() {
		r.t.Fatalf("task %s did not finish: %+v (known %v, %v)", id, st, ok, err)
	}
	return st
}

func (r *rig) snapshot() *agent.Snapshot {
	s, err := r.rt.Snapshot(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func TestOneTurn(t *testing.T) {
	srv := llmtest.New(t, td("one_turn.json"))
	r := newRig(t, template(srv.BaseURL()))
	r.submit("t1", "What is the capital of France?")
	st := r.wait("t1")
	if st.Status != agent.ResultDone || string(st.Output) != `"Paris is the capital of France."` {
		t.Fatalf("state = %+v", st)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	b := reqs[0].Body
	if b.Model != "qwen2.5:0.5b" || len(b.Messages) != 2 || b.Messages[0].Role != "system" ||
		*b.Messages[0].Content != "You are a test agent." || *b.Messages[1].Content != "What is the capital of France?" {
		t.Fatalf("request = %s", reqs[0].Raw)
	}
	if len(b.Tools) != 4 || b.Tools[0].Function.Name != "file_append" || !strings.Contains(string(b.Tools[0].Function.Parameters), `"line"`) {
		t.Fatalf("tools = %+v", b.Tools)
	}
	vars := r.snapshot().Memory.WorkingVariables
	if vars["tokens_prompt"] != float64(24) && vars["tokens_prompt"] != int64(24) {
		t.Fatalf("tokens_prompt = %#v (vars %v)", vars["tokens_prompt"], vars)
	}
	if vars["tokens_completion"] != int64(8) && vars["tokens_completion"] != float64(8) {
		t.Fatalf("tokens_completion = %#v", vars["tokens_completion"])
	}
}

// Two tool calls in two steps, then the answer; the model sees each result
// with its call id.
func TestTwoToolCallsThenAnswer(t *testing.T) {
	srv := llmtest.New(t, td("call_append.json"), td("call_sleep.json"), td("final_done.json"))
	r := newRig(t, template(srv.BaseURL()))
	r.submit("t1", "Write a note, then wait.")
	st := r.wait("t1")
	if st.Status != agent.ResultDone || string(st.Output) != `"I wrote the note and waited."` {
		t.Fatalf("state = %+v", st)
	}
	data, err := os.ReadFile(filepath.Join(host.ArtifactsDir(r.dir, "m1"), "notes.txt"))
	if err != nil || string(data) != "first note\n" {
		t.Fatalf("notes.txt = %q, %v", data, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	last := reqs[2].Body
	if last.ToolResults() != 2 {
		t.Fatalf("third request has %d tool results: %s", last.ToolResults(), reqs[2].Raw)
	}
	var ids []string
	for _, m := range last.Messages {
		if m.Role == "tool" {
			ids = append(ids, m.ToolCallID)
		}
	}
	if strings.Join(ids, ",") != "call_a1,call_s1" {
		t.Fatalf("tool result ids = %v", ids)
	}
	s := r.snapshot()
	if s.Turn != nil || s.PendingAction != nil {
		t.Fatalf("turn left behind: %+v %+v", s.Turn, s.PendingAction)
	}
	h := s.Memory.ShortTermHistory
	if len(h) != 4 || h[1].Role != "tool" || h[1].Name != "file_append" || h[3].Role != "assistant" {
		t.Fatalf("history = %+v", h)
	}
	if v := s.Memory.WorkingVariables["tokens_prompt"]; v != int64(480) && v != float64(480) {
		t.Fatalf("tokens_prompt = %#v", v)
	}
}

// Bad arguments (a wrong type, text that is not JSON) come back to the
// model as tool errors, and the task goes on.
func TestBadArgumentsReachTheModel(t *testing.T) {
	srv := llmtest.New(t, td("call_bad_args.json"), td("final_sorry.json"))
	r := newRig(t, template(srv.BaseURL()))
	r.submit("t1", "sleep a bit")
	st := r.wait("t1")
	if st.Status != agent.ResultDone {
		t.Fatalf("state = %+v", st)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var errs []string
	for _, m := range reqs[1].Body.Messages {
		if m.Role == "tool" {
			errs = append(errs, *m.Content)
		}
	}
	if len(errs) != 2 || !strings.HasPrefix(errs[0], "error: bad arguments") || !strings.Contains(errs[1], "want a JSON object") {
		t.Fatalf("tool results the model saw: %q", errs)
	}
}

func TestRetryAfterThenSuccess(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Answer{Status: 429, Header: map[string]string{"Retry-After": "1"}, File: "testdata/error_429.json"},
		td("one_turn.json"))
	c := &llm.Client{BaseURL: srv.BaseURL(), Model: "m", BackoffMin: time.Millisecond}
	start := time.Now()
	comp, err := llm.Chat(c, context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("retried after %s: Retry-After: 1 not honoured", waited)
	}
	if comp.Content != "Paris is the capital of France." || len(srv.Requests()) != 2 {
		t.Fatalf("completion %+v after %d requests", comp, len(srv.Requests()))
	}
}

// 500s until the retry budget is spent: the task fails with the server's
// message and the number of attempts.
func TestServerErrorsExhaustRetries(t *testing.T) {
	var answers []llmtest.Answer
	for i := 0; i < 5; i++ {
		answers = append(answers, llmtest.Answer{Status: 500, File: "testdata/error_500.json"})
	}
	srv := llmtest.New(t, answers...)
	tmpl := template(srv.BaseURL())
	tmpl.Brain.MaxRetries = 2
	r := newRig(t, tmpl)
	r.submit("t1", "hello")
	st := r.wait("t1")
	if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "giving up after 3 attempts") ||
		!strings.Contains(st.Error, "500") || !strings.Contains(st.Error, "model is overloaded") {
		t.Fatalf("state = %+v", st)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

func TestHungServerTimesOut(t *testing.T) {
	srv := llmtest.New(t, llmtest.Answer{Hang: true})
	tmpl := template(srv.BaseURL())
	tmpl.Brain.TimeoutMs = 200
	r := newRig(t, tmpl)
	r.submit("t1", "hello")
	st := r.wait("t1")
	if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "did not answer in time") || !strings.Contains(st.Error, "200ms") {
		t.Fatalf("state = %+v", st)
	}
}

// An unreachable server does not fail the task: it waits, the agent keeps
// accepting tasks, and both finish once the server is back.
func TestUnreachableServerWaits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r := newRig(t, template("http://"+addr+"/v1"))
	r.submit("t1", "first")
	wait.For(t, 10*time.Second, "the agent to log that the model server is unreachable", func() bool {
		return strings.Contains(r.logs(), "model server unreachable")
	})
	r.submit("t2", "second") // accepted while t1 waits
	if st, _, _ := r.rt.TaskState(context.Background(), "t1"); st.Status != agent.TaskRunning {
		t.Fatalf("t1 = %+v while the server is down, want running", st)
	}
	// Serve the answers on the address the template names.
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %s taken meanwhile: %v", addr, err)
	}
	llmtest.NewOn(t, ln2, td("one_turn.json"), td("final_done.json"))
	if st := r.wait("t1"); st.Status != agent.ResultDone {
		t.Fatalf("t1 = %+v", st)
	}
	if st := r.wait("t2"); st.Status != agent.ResultDone || string(st.Output) != `"I wrote the note and waited."` {
		t.Fatalf("t2 = %+v", st)
	}
}

// A long conversation stays within the budget; what leaves the window is
// summarised by the model into working memory.
func TestLongConversationSummarised(t *testing.T) {
	var mu sync.Mutex
	summaries := 0
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		if len(req.Body.Tools) == 0 { // the summary request has no tools
			mu.Lock()
			summaries++
			n := summaries
			mu.Unlock()
			return llmtest.Answer{Body: completion(fmt.Sprintf("summary %d of the earlier talk", n))}
		}
		return td("one_turn.json")
	})
	tmpl := template(srv.BaseURL())
	tmpl.ContextBudget = design.ContextBudget{MaxMessages: 6, MaxTokens: 200}
	r := newRig(t, tmpl)
	for i := 0; i < 10; i++ {
		r.submit(fmt.Sprint("t", i), fmt.Sprintf("question %d %s", i, strings.Repeat("x", 40)))
	}
	r.wait("t9")
	s := r.snapshot()
	h := s.Memory.ShortTermHistory
	bytes := 0
	for _, m := range h {
		bytes += len(m.Content)
	}
	if len(h) > 6 || bytes/4 > 200 {
		t.Fatalf("window of %d messages, ~%d tokens: over budget", len(h), bytes/4)
	}
	sum, _ := s.Memory.WorkingVariables["history_summary"].(string)
	mu.Lock()
	n := summaries
	mu.Unlock()
	if n == 0 || sum != fmt.Sprintf("summary %d of the earlier talk", n) {
		t.Fatalf("history_summary = %q after %d summary requests", sum, n)
	}
	// The model's later requests carry the summary.
	reqs := srv.Requests()
	last := reqs[len(reqs)-1].Body
	if len(last.Tools) == 0 {
		last = reqs[len(reqs)-2].Body
	}
	if !strings.Contains(*last.Messages[1].Content, "summary") {
		t.Fatalf("the last request does not carry the summary: %s", reqs[len(reqs)-1].Raw)
	}
}

// When the model cannot summarise, the window is truncated with a note.
func TestSummaryUnreachableTruncatesWithNote(t *testing.T) {
	srv := llmtest.NewFunc(t, func(req llmtest.Request) llmtest.Answer {
		if len(req.Body.Tools) == 0 {
			return llmtest.Answer{Status: 400, Body: `{"error":{"message":"context too long"}}`}
		}
		return td("one_turn.json")
	})
	tmpl := template(srv.BaseURL())
	tmpl.ContextBudget = design.ContextBudget{MaxMessages: 4}
	r := newRig(t, tmpl)
	for i := 0; i < 4; i++ {
		r.submit(fmt.Sprint("t", i), fmt.Sprint("question ", i))
	}
	r.wait("t3")
	s := r.snapshot()
	vars := s.Memory.WorkingVariables
	note, _ := vars["history_summary_note"].(string)
	sum, _ := vars["history_summary"].(string)
	if len(s.Memory.ShortTermHistory) != 4 || !strings.Contains(note, "without a model summary") ||
		!strings.Contains(note, "context too long") || !strings.Contains(sum, "question 0") {
		t.Fatalf("window %d, note %q, summary %q", len(s.Memory.ShortTermHistory), note, sum)
	}
}

func TestStreamedAnswerReportsProgress(t *testing.T) {
	srv := llmtest.New(t, llmtest.Answer{File: "testdata/stream_call.sse", Stream: true},
		llmtest.Answer{File: "testdata/stream_text.sse", Stream: true})
	tmpl := template(srv.BaseURL())
	tmpl.Brain.Stream = true
	r := &rig{t: t, dir: t.TempDir(), tmpl: tmpl}
	phases := r.recordPhases()
	r.open()
	r.submit("t1", "stream please")
	st := r.wait("t1")
	if st.Status != agent.ResultDone || string(st.Output) != `"Paris."` {
		t.Fatalf("state = %+v", st)
	}
	data, _ := os.ReadFile(filepath.Join(host.ArtifactsDir(r.dir, "m1"), "s.txt"))
	if string(data) != "streamed\n" {
		t.Fatalf("s.txt = %q", data)
	}
	got := phases()
	if !strings.Contains(got, "thinking: 3 tokens") || !strings.Contains(got, "tool:file_append") {
		t.Fatalf("progress phases = %s", got)
	}
	if !srv.Requests()[0].Body.Stream {
		t.Fatal("request did not ask for a stream")
	}
}

func TestAPIKeyFromEnvironment(t *testing.T) {
	srv := llmtest.New(t, td("one_turn.json"))
	tmpl := template(srv.BaseURL())
	tmpl.Brain.APIKeyEnv = "OPENSTARRY_TEST_MODEL_KEY"
	t.Setenv("OPENSTARRY_TEST_MODEL_KEY", "")
	if _, err := llm.New(tmpl.Brain); err == nil || !strings.Contains(err.Error(), "OPENSTARRY_TEST_MODEL_KEY") {
		t.Fatalf("empty key: err = %v", err)
	}
	t.Setenv("OPENSTARRY_TEST_MODEL_KEY", "sk-test-123")
	r := newRig(t, tmpl)
	r.submit("t1", "hi")
	r.wait("t1")
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-test-123" {
		t.Fatalf("Authorization = %q", got)
	}
}

func TestUnreachableIsErrBrainUnavailable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := &llm.Client{BaseURL: "http://" + addr + "/v1", Model: "m"}
	_, err := llm.Chat(c, context.Background(), "x")
	if !errors.Is(err, agent.ErrBrainUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func completion(content string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0,
		"message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}}})
	return string(b)
}
