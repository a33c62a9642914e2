package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
	"github.com/openstarry/openstarry-edge/transport/llm"
)

// BenchmarkModelTurn measures, against llama.cpp's llama-server and the
// tiny model of internal/llamaserver (one thread), what the agent adds to a
// model turn, and the tokens per second it sees.
//
// turn: each iteration sends the request the agent is about to send (built
// from its saved window by BuildRequest, the brain's own function) as a
// raw HTTP POST, and submits the same task to the agent (a real bbolt
// store: the task saved, the request, the answer saved, the result) and
// waits for its result; the two alternate which goes first, so that the
// server's prompt cache favours neither. agent/raw is the ratio of their
// times; agent-overhead-ms their difference.
//
// tokens: a streamed answer of 256 tokens through the brain: completion
// tokens per second of the whole request, as the agent sees them.
func BenchmarkModelTurn(b *testing.B) {
	s := llamaserver.Start(b, llamaserver.Options{Context: 32768, Predict: 256})
	b.Run("turn", func(b *testing.B) {
		tmpl := realTemplate(s)
		tmpl.Tools = nil
		tmpl.ContextBudget = design.ContextBudget{MaxMessages: 100000, MaxTokens: 10000000}
		r := newRig(b, tmpl)
		ctx := context.Background()
		var raw, agentT time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			task := agent.Task{TaskID: fmt.Sprint("t", i), Input: json.RawMessage(`"hi"`)}
			turn := agent.Turn{SystemPrompt: tmpl.SystemPrompt, History: r.snapshot().Memory.ShortTermHistory, Task: task}
			req := llm.BuildRequest(turn)
			body, err := json.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			body = append([]byte(`{"model":"tiny",`), body[1:]...)
			b.StartTimer()
			doRaw := func() {
				start := time.Now()
				resp, err := http.Post(s.URL+"/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.Contains(data, []byte(`"hello"`)) {
					b.Fatalf("raw request: %d %s", resp.StatusCode, data)
				}
				raw += time.Since(start)
			}
			doAgent := func() {
				start := time.Now()
				r.submit(task.TaskID, "hi")
				st, ok, err := r.rt.WaitTask(ctx, task.TaskID)
				if err != nil || !ok || st.Status != agent.ResultDone || string(st.Output) != `"hello"` {
					b.Fatalf("task: %+v %v %v", st, ok, err)
				}
				agentT += time.Since(start)
			}
			if i%2 == 0 {
				doRaw()
				doAgent()
			} else {
				doAgent()
				doRaw()
			}
		}
		b.StopTimer()
		n := float64(b.N)
		b.ReportMetric(float64(raw.Microseconds())/1000/n, "raw-ms/turn")
		b.ReportMetric(float64(agentT.Microseconds())/1000/n, "agent-ms/turn")
		b.ReportMetric(float64(agentT-raw)/float64(time.Millisecond)/n, "agent-overhead-ms")
		b.ReportMetric(float64(agentT)/float64(raw), "agent/raw")
	})
	b.Run("tokens", func(b *testing.B) {
		br, err := llm.New(design.Brain{Provider: "openai", BaseURL: s.URL, Model: "tiny", Stream: true, TimeoutMs: 120000})
		if err != nil {
			b.Fatal(err)
		}
		turn := agent.Turn{SystemPrompt: "test", Task: agent.Task{Input: json.RawMessage(`"count ` + llamaserver.SlowWord + `"`)},
			OnTokens: func(int) {}}
		var tokens int64
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			reply, err := br.Think(context.Background(), turn)
			if err != nil {
				b.Fatal(err)
			}
			tokens += reply.Usage.CompletionTokens
		}
		b.StopTimer()
		b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		b.ReportMetric(float64(tokens)/float64(b.N), "tokens/turn")
	})
}
