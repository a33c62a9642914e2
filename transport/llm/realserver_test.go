package llm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/llm"
)

// The tests below run the brain against llama.cpp's own llama-server with
// the tiny model of internal/llamaserver (skipped without the binary,
// except in CI): what a real server does on the wire, not a recording.

func realTemplate(s *llamaserver.Server) *design.Template {
	tmpl := template(s.URL)
	tmpl.Brain.Model = "tiny"
	tmpl.Brain.TimeoutMs = 60000
	return tmpl
}

func notes(t *testing.T, r *rig) string {
	data, err := os.ReadFile(filepath.Join(host.ArtifactsDir(r.dir, "m1"), "notes.txt"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// A task through a tool call and the answer after its result, non-streamed
// and streamed: the call's arguments arrive in fragments and the usage in
// a last chunk without choices; tool-call ids are the server's own.
func TestRealServerToolCall(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{})
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			tmpl := realTemplate(s)
			tmpl.Brain.Stream = stream
			r := &rig{t: t, dir: t.TempDir(), tmpl: tmpl}
			phases := r.recordPhases()
			r.open()
			r.submit("t1", "write hello into notes.txt")
			st := r.wait("t1")
			if st.Status != agent.ResultDone || string(st.Output) != `"done"` {
				t.Fatalf("state = %+v\n%s", st, r.logs())
			}
			if got := notes(t, r); got != "hello\n" {
				t.Fatalf("notes.txt = %q", got)
			}
			vars := r.snapshot().Memory.WorkingVariables
			if p, _ := vars["tokens_prompt"].(int64); p < 500 {
				t.Fatalf("tokens_prompt = %#v: the usage of the real server was not counted", vars["tokens_prompt"])
			}
			if c, _ := vars["tokens_completion"].(int64); c < 10 {
				t.Fatalf("tokens_completion = %#v", vars["tokens_completion"])
			}
			got := phases()
			if stream && !strings.Contains(got, "tokens") {
				t.Fatalf("no token count on the progress: %s", got)
			}
		})
	}
}

// The client alone against a streamed tool call: every fragment counted,
// the arguments put together, the usage of the chunk without choices.
func TestRealServerStreamedCall(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{})
	b, err := llm.New(design.Brain{Provider: "openai", BaseURL: s.URL, Model: "tiny", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	b.Client.StreamInterval = time.Nanosecond
	var counts []int
	turn := agent.Turn{SystemPrompt: "test", Task: agent.Task{Input: []byte(`"append"`)},
		Tools:    []agent.ToolSpec{{Name: "file_append", Parameters: []byte(`{"type":"object","properties":{"file":{"type":"string"},"line":{"type":"string"}},"required":["file","line"]}`)}},
		OnTokens: func(n int) { counts = append(counts, n) }}
	reply, err := b.Think(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Calls) != 1 || reply.Calls[0].Tool != "file_append" || string(reply.Calls[0].Args) != `{"file": "notes.txt", "line": "hello"}` ||
		len(reply.Calls[0].ID) < 16 {
		t.Fatalf("calls = %+v", reply.Calls)
	}
	if reply.Usage.PromptTokens == 0 || reply.Usage.CompletionTokens == 0 {
		t.Fatalf("usage = %+v: the last chunk's usage was lost", reply.Usage)
	}
	if len(counts) < 3 || counts[len(counts)-1] < 4 {
		t.Fatalf("token counts reported %v: want the fragments counted as they came", counts)
	}
}

// A prompt over the server's context: llama-server answers 400
// exceed_context_size_error; the brain leaves out the oldest messages of
// the window and asks again, and a task whose own text is over the context
// fails saying so.
func TestRealServerContextOverflow(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Context: 1024})
	tmpl := realTemplate(s)
	tmpl.Tools = nil // the tool definitions alone take 700 tokens of the 1024
	tmpl.ContextBudget = design.ContextBudget{MaxMessages: 200, MaxTokens: 100000}
	r := newRig(t, tmpl)
	for i := range 12 {
		r.submit(fmt.Sprint("t", i), fmt.Sprintf("question %d %s", i, strings.Repeat("words ", 40)))
	}
	for i := range 12 {
		if st := r.wait(fmt.Sprint("t", i)); st.Status != agent.ResultDone || string(st.Output) != `"hello"` {
			t.Fatalf("t%d = %+v\n%s", i, st, s.Log())
		}
	}
	if n := len(r.snapshot().Memory.ShortTermHistory); n < 20 {
		t.Fatalf("window of %d messages: the window itself is not cut, only the request", n)
	}
	if !strings.Contains(s.Log(), "exceeds the available context size") {
		t.Fatalf("the server never refused a prompt: the test did not overflow the context\n%s", s.Log())
	}
	r.submit("big", strings.Repeat("far too long ", 600))
	st := r.wait("big")
	if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "exceeds the available context size") ||
		!strings.Contains(st.Error, "even without the conversation window") {
		t.Fatalf("big = %+v", st)
	}
}

// The client gives up (timeout_ms) while the model is still generating a
// streamed answer: the task fails saying so, and llama-server cancels the
// slot when it cannot write the next piece, long before the 60,000 tokens
// it was allowed (a minute here), so that the next request is answered at
// once. (A request without stream is not cancelled: llama-server
// generates it to the end, which is why the local-model template streams.)
func TestRealServerClientTimeout(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Context: 65536, Predict: 60000})
	tmpl := realTemplate(s)
	tmpl.Tools = nil
	tmpl.Brain.Stream = true
	tmpl.Brain.TimeoutMs = 500
	r := newRig(t, tmpl)
	r.submit("slow", "take your time "+llamaserver.SlowWord)
	st := r.wait("slow")
	if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "did not answer in time") {
		t.Fatalf("slow = %+v", st)
	}
	gaveUp := time.Now()
	wait.Until(t, 20*time.Second, "llama-server to cancel the abandoned slot", func() error {
		busy, err := s.Generating(context.Background())
		if err == nil && busy {
			err = fmt.Errorf("a slot is still generating")
		}
		return err
	})
	t.Logf("the slot was free %s after the task failed", time.Since(gaveUp).Round(time.Millisecond))
	// The agent's window now holds SlowWord: ask without it.
	c := &llm.Client{BaseURL: s.URL, Model: "tiny", Timeout: 10 * time.Second}
	if comp, err := llm.Chat(c, context.Background(), "hi"); err != nil || comp.Content != "hello" {
		t.Fatalf("the next request: %+v, %v", comp, err)
	}
}

// llama-server SIGKILLed while it generates the answer, and started again:
// the task waits (the connection closed under the answer is an unreachable
// server), asks again with backoff, and completes; the tool ran once.
func TestRealServerKilledAndRestarted(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Context: 4096, Predict: 3000})
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			tmpl := realTemplate(s)
			tmpl.Brain.Stream = stream
			r := newRig(t, tmpl)
			r.submit("t1", "write hello "+llamaserver.SlowWord)
			// The first step calls file_append; the second generates for
			// seconds: that is when the server dies.
			wait.For(t, 30*time.Second, "the tool to run and the model to generate the answer", func() bool {
				busy, _ := s.Generating(context.Background())
				return busy && notes(t, r) == "hello\n"
			})
			s.Kill()
			wait.For(t, 30*time.Second, "the agent to log that the model server is unreachable", func() bool {
				return strings.Contains(r.logs(), "model server unreachable")
			})
			if st, _, _ := r.rt.TaskState(context.Background(), "t1"); st.Status != agent.TaskRunning {
				t.Fatalf("t1 = %+v while the server is down, want running", st)
			}
			s.Restart()
			st := r.wait("t1")
			if st.Status != agent.ResultDone || !strings.HasPrefix(string(st.Output), `"lalala`) {
				t.Fatalf("t1 = %+v\n%s", st, r.logs())
			}
			if got := notes(t, r); got != "hello\n" {
				t.Fatalf("notes.txt = %q: the tool ran again", got)
			}
		})
	}
}

// A model that writes a tool call the server does not parse (here: an
// agent without tools whose system prompt shows the model <tools>, so the
// tiny model writes its call as text): the answer is asked for again, then
// the task fails saying why; the half-written call never runs.
func TestRealServerUnparsedCall(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{})
	tmpl := realTemplate(s)
	tmpl.Tools = nil
	tmpl.SystemPrompt = "Answer with <tools> in mind."
	r := newRig(t, tmpl)
	r.submit("t1", "append")
	st := r.wait("t1")
	if st.Status != agent.ResultFailed || !strings.Contains(st.Error, "3 answers in a row were unusable") ||
		!strings.Contains(st.Error, "<tool_call>") {
		t.Fatalf("t1 = %+v", st)
	}
	if got := notes(t, r); got != "" {
		t.Fatalf("notes.txt = %q", got)
	}
}
