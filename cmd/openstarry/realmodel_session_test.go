//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/llamaserver"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// recordingProxy forwards to llama-server and keeps every request body,
// so that a test sees what the model was sent.
type recordingProxy struct {
	mu     sync.Mutex
	bodies []string
}

func (p *recordingProxy) start(t *testing.T, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.bodies = append(p.bodies, string(body))
		p.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func (p *recordingProxy) since(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies[n:]...)
}

func (p *recordingProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bodies)
}

// TestRealModelSessionResume: session continuity with llama-server's tiny
// model as the master's brain, through the real daemon. A project of three
// tasks (each one appends a line with file_append, the model's call); the
// master is SIGKILLed while the model generates the second task's answer;
// the session is interrupted (crash); a resume finishes the plan. Every
// line is in the files once, and the requests the model received after the
// resume carry the resume context, naming the interrupted session; the
// master asked the model for the session's summary (session_summary), and
// what the model wrote is the child session's context_summary, not the
// counting line the echo brain would give.
func TestRealModelSessionResume(t *testing.T) {
	s := llamaserver.Start(t, llamaserver.Options{Context: 32768, Predict: 1500})
	var proxy recordingProxy
	base := proxy.start(t, s.Root)

	data := dataDir(t)
	var tmpl map[string]any
	if err := json.Unmarshal(mustShipped(t, "master"), &tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl["brain"] = map[string]any{"provider": "openai", "base_url": base, "model": "tiny", "stream": true, "timeout_ms": 120000}
	tmpl["context_budget"] = map[string]any{"max_messages": 200, "max_tokens": 100000}
	raw, _ := json.Marshal(tmpl)
	if err := os.MkdirAll(filepath.Join(data, "templates"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "templates", "master.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c, api0 := sessionDaemon(t, data)
	var v session.ProjectView
	defer func() {
		if t.Failed() {
			for i, b := range proxy.since(0) {
				t.Logf("request %d: %.3000s", i, b)
			}
			t.Logf("%d model requests; project %+v; daemon log:\n%s", proxy.count(), project(t, api0, v.ID), c.logs())
		}
	}()

	plan := map[string]any{"name": "model plan", "description": "three model tasks", "tasks": []any{
		map[string]any{"phase": 1, "type": "code", "name": "one", "input": "write hello"},
		map[string]any{"phase": 1, "type": "code", "name": "two", "input": "write hello " + llamaserver.SlowWord, "depends_on": []any{0}},
		map[string]any{"phase": 2, "type": "test", "name": "three", "input": "write hello", "depends_on": []any{1}},
	}}
	apiInto(t, "POST", api0+"/projects", plan, 201, &v)

	// Kill the master while the model writes task two's answer (after its
	// file_append ran).
	wait.For(t, 60*time.Second, "the model generating the answer of task two", func() bool {
		busy, _ := s.Generating(t.Context())
		if !busy {
			return false
		}
		for _, b := range proxy.since(0) {
			if strings.Contains(b, "|slow|") && strings.Contains(b, `"role":"tool"`) { // < and > are escaped
				return true
			}
		}
		return false
	})
	m, _ := agentInfo(daemonStatus(t, data), "master")
	if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the session interrupted", func() bool {
		var ss []session.Session
		apiInto(t, "GET", api0+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
		return ss[0].Status == session.SessionInterrupted && ss[0].InterruptionReason == session.ReasonCrash
	})
	waitAgent(t, data, "master", 30*time.Second, func(a control.AgentInfo) bool { return a.State == control.StateRunning && a.PID != m.PID })

	before := proxy.count()
	var res session.ResumeResult
	apiInto(t, "POST", api0+"/projects/"+v.ID+"/sessions/"+v.SessionID+"/resume", nil, 201, &res)
	wait.For(t, 90*time.Second, "the child session completed", func() bool {
		p := project(t, api0, v.ID)
		return p.SessionID == res.Session.ID && p.Status == session.SessionCompleted
	})
	if p := project(t, api0, v.ID); p.Progress.Completed != 3 {
		t.Fatalf("after the resume: %+v", p)
	}
	files, _ := filepath.Glob(filepath.Join(data, "projects", v.ID, "sessions", "*", "artifacts", "notes.txt"))
	lines := 0
	for _, f := range files {
		lines += countLines(t, f)["hello"]
	}
	if lines != 3 {
		t.Fatalf("%d lines of hello in %v, want one per task", lines, files)
	}
	after := proxy.since(before)
	carried := 0
	for _, b := range after {
		if strings.Contains(b, v.SessionID) && strings.Contains(b, "interruption_reason") {
			carried++
		}
	}
	if len(after) == 0 || carried == 0 {
		t.Fatalf("%d requests after the resume, %d carry the resume context of %s", len(after), carried, v.SessionID)
	}
	t.Logf("%d model requests after the resume, %d with the resume context", len(after), carried)

	asked := 0
	for _, b := range proxy.since(0) {
		if strings.Contains(b, "Session continuity asks for this session's context summary") {
			asked++
		}
	}
	if asked == 0 {
		t.Fatal("no session_summary request reached the model")
	}
	var summary string
	wait.For(t, 60*time.Second, "the child session's context_summary, written by the model", func() bool {
		var ss []session.Session
		apiInto(t, "GET", api0+"/projects/"+v.ID+"/sessions", nil, 200, &ss)
		for _, s := range ss {
			if s.ID == res.Session.ID {
				summary = s.ContextSummary
			}
		}
		return summary != "" && !strings.Contains(summary, "tasks completed")
	})
	t.Logf("%d summary requests; the model's context_summary: %.200q", asked, summary)
}
