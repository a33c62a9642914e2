package llm_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/transport/llm"
	"github.com/openstarry/openstarry-edge/transport/llm/llmtest"
)

func callAnswer(name, args string) llmtest.Answer {
	return llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"",` +
		`"tool_calls":[{"id":"c1","type":"function","function":{"name":"` + name + `","arguments":` + quote(args) + `}}]}}]}`}
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// Arguments that break the tool's schema (file_append without "line") are
// refused before the tool runs, and the model is told which field is
// missing. Before the check, the tool appended an empty line.
func TestArgsCheckedAgainstSchema(t *testing.T) {
	srv := llmtest.New(t, callAnswer("file_append", `{"file":"notes.txt"}`), td("final_sorry.json"))
	r := newRig(t, template(srv.BaseURL()))
	r.submit("t1", "append")
	if st := r.wait("t1"); st.Status != agent.ResultDone {
		t.Fatalf("state = %+v", st)
	}
	if _, err := os.Stat(filepath.Join(host.ArtifactsDir(r.dir, "m1"), "notes.txt")); !os.IsNotExist(err) {
		t.Fatalf("notes.txt exists (%v): the tool ran with arguments its schema refuses", err)
	}
	reqs := srv.Requests()
	var got string
	for _, m := range reqs[1].Body.Messages {
		if m.Role == "tool" {
			got = *m.Content
		}
	}
	if got != "error: bad arguments: /line: missing required field" {
		t.Fatalf("the model was told %q", got)
	}
}

// An answer that is neither text nor a valid tool call is asked for again,
// at most twice more, and then the task fails saying why; nothing of it
// runs.
func TestMalformedAnswers(t *testing.T) {
	unparsed := llmtest.Answer{Body: completion("<tool_call>\n{\"name\": \"file_append\", \"arguments\": {\"file\": \"x.txt\", \"line\": ")}
	cut := llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"",` +
		`"tool_calls":[{"id":"c1","type":"function","function":{"name":"file_append","arguments":"{\"file\":\"x.txt\",\"line\":\"a\"}"}}]}}]}`}
	empty := llmtest.Answer{Body: completion("")}
	noName := llmtest.Answer{Body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"",` +
		`"tool_calls":[{"id":"c1","type":"function","function":{"arguments":"{}"}}]}}]}`}
	for _, tc := range []struct {
		name    string
		answers []llmtest.Answer
		status  string
		want    string
	}{
		{"text holding an unparsed call", []llmtest.Answer{unparsed, unparsed, unparsed}, agent.ResultFailed,
			"3 answers in a row were unusable, the last: the model's answer is neither text nor a valid tool call: the text holds <tool_call>"},
		{"a call cut by the token limit", []llmtest.Answer{cut, cut, cut}, agent.ResultFailed, "token limit inside a tool call"},
		{"empty", []llmtest.Answer{empty, empty, empty}, agent.ResultFailed, "the answer is empty"},
		{"a call without a name", []llmtest.Answer{noName, noName, noName}, agent.ResultFailed, "has no function name"},
		{"good on the third", []llmtest.Answer{unparsed, cut, td("one_turn.json")}, agent.ResultDone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.New(t, tc.answers...)
			r := newRig(t, template(srv.BaseURL()))
			r.submit("t1", "append")
			st := r.wait("t1")
			if st.Status != tc.status || !strings.Contains(st.Error, tc.want) {
				t.Fatalf("state = %+v, want %s with %q", st, tc.status, tc.want)
			}
			if n := len(srv.Requests()); n != 3 {
				t.Fatalf("%d requests, want 3", n)
			}
			if _, err := os.Stat(filepath.Join(host.ArtifactsDir(r.dir, "m1"), "x.txt")); !os.IsNotExist(err) {
				t.Fatalf("x.txt exists: a malformed call ran")
			}
		})
	}
}

// A kept-alive connection the server has closed (llama-server closes idle
// ones) is not an error: the request goes again on a new connection. The
// server here answers the first request of each connection and drops the
// connection at the second, before answering.
func TestStaleKeepAliveConnection(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RemoteAddr]++
		n := seen[r.RemoteAddr]
		mu.Unlock()
		if n > 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completion("fine"))
	}))
	defer srv.Close()
	c := &llm.Client{BaseURL: srv.URL + "/v1", Model: "m", HTTP: &http.Client{Transport: &http.Transport{}}}
	for i := range 3 {
		comp, err := llm.Chat(c, context.Background(), "hi")
		if err != nil || comp.Content != "fine" {
			t.Fatalf("request %d: %+v %v", i, comp, err)
		}
	}
}

// A streamed answer cut by a dropped connection is an unreachable server
// (the kernel waits and asks again later), not a malformed answer to ask
// for again at once.
func TestCutStreamIsUnavailable(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"}}]}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	b := &llm.Brain{Client: &llm.Client{BaseURL: srv.URL + "/v1", Model: "m"}, Stream: true}
	_, err := b.Think(context.Background(), agent.Turn{Task: agent.Task{Input: []byte(`"hi"`)}})
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(err, agent.ErrBrainUnavailable) || n != 1 {
		t.Fatalf("after %d requests: %v", n, err)
	}
}
