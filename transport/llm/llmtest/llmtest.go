// Package llmtest is a chat completions server for tests: an httptest
// server on loopback that answers with recorded answers, in order, and keeps
// every request it received. It stands in for a model server, the one part
// of the system that cannot run in a test.
package llmtest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Answer is one recorded answer.
type Answer struct {
	Status int               // default 200
	Header map[string]string // extra headers (Retry-After, ...)
	File   string            // body from this file (testdata-relative paths are the caller's)
	Body   string            // body, when File is empty
	// Stream sends the body as text/event-stream, flushing line by line.
	Stream bool
	// Hang keeps the request open until the client gives up.
	Hang bool
	// Delay waits before answering.
	Delay time.Duration
	// Gap, with Stream, waits this long after each line, at the pace of a
	// model that writes its tokens one by one.
	Gap time.Duration
}

// Request is one request the server received.
type Request struct {
	Header http.Header
	Body   ChatRequest
	Raw    []byte
}

// ChatRequest is the part of a chat completions request tests look at.
type ChatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// ToolResults counts the role "tool" messages of the request.
func (r ChatRequest) ToolResults() int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "tool" {
			n++
		}
	}
	return n
}

// Server is a running fake model server.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	script  []Answer
	next    func(Request) Answer
	reqs    []Request
	stopped chan struct{}
}

// New starts a server that gives the answers in order; after the last one
// it answers 500. Its URL plus "/v1" is a brain's base_url.
func New(t testing.TB, answers ...Answer) *Server {
	return start(t, nil, answers)
}

// NewOn is New on a listener of the caller's (an address a template
// already names).
func NewOn(t testing.TB, ln net.Listener, answers ...Answer) *Server {
	return start(t, ln, answers)
}

func start(t testing.TB, ln net.Listener, answers []Answer) *Server {
	s := &Server{script: answers, stopped: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if ln != nil {
		s.Server.Listener.Close()
		s.Server.Listener = ln
	}
	s.Server.Start()
	t.Cleanup(func() {
		close(s.stopped)
		s.Server.Close()
	})
	return s
}

// NewFunc starts a server that asks next for each answer.
func NewFunc(t testing.TB, next func(Request) Answer) *Server {
	s := New(t)
	s.next = next
	return s
}

// BaseURL is the base_url of a template pointing at this server.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	req := Request{Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	var a Answer
	switch {
	case s.next != nil:
		next := s.next
		s.mu.Unlock()
		a = next(req)
		s.mu.Lock()
	case len(s.script) > 0:
		a = s.script[0]
		s.script = s.script[1:]
	default:
		a = Answer{Status: 500, Body: `{"error":{"message":"the recorded answers ran out"}}`}
	}
	s.mu.Unlock()
	if a.Hang {
		select {
		case <-r.Context().Done():
		case <-s.stopped:
		}
		return
	}
	if a.Delay > 0 {
		time.Sleep(a.Delay)
	}
	body := []byte(a.Body)
	if a.File != "" {
		var err error
		if body, err = os.ReadFile(filepath.Clean(a.File)); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
	}
	for k, v := range a.Header {
		w.Header().Set(k, v)
	}
	if a.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	status := a.Status
	if status == 0 {
		status = 200
	}
	w.WriteHeader(status)
	if !a.Stream {
		_, _ = w.Write(body)
		return
	}
	f, _ := w.(http.Flusher)
	for len(body) > 0 {
		i := 0
		for i < len(body) && body[i] != '\n' {
			i++
		}
		if i < len(body) {
			i++
		}
		_, _ = w.Write(body[:i])
		body = body[i:]
		if f != nil {
			f.Flush()
		}
		if a.Gap > 0 && len(body) > 0 {
			time.Sleep(a.Gap)
		}
	}
}
