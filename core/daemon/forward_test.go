package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// forwardRig is a daemon-side hop (agentAuth.forward behind an HTTP server,
// as proxyAgent calls it) in front of agent, a real HTTP server standing
// for an agent's API.
type forwardRig struct {
	a     *agentAuth
	front *httptest.Server
	agent *httptest.Server
	conns atomic.Int32 // connections the agent accepted
}

func newForwardRig(t *testing.T, agent http.HandlerFunc) *forwardRig {
	t.Helper()
	g := &forwardRig{a: &agentAuth{token: "daemon-token", base: http.DefaultTransport}}
	g.agent = httptest.NewUnstartedServer(agent)
	g.agent.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			g.conns.Add(1)
		}
	}
	g.agent.Start()
	t.Cleanup(g.agent.Close)
	addr := strings.TrimPrefix(g.agent.URL, "http://")
	g.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !forwardable(r) {
			http.Error(w, "not forwardable", http.StatusTeapot)
			return
		}
		var be errBody
		switch err := g.a.forward(w, r, addr); {
		case errors.As(err, &be):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}))
	t.Cleanup(g.front.Close)
	return g
}

// TestForwardHeaders: the agent gets the method, the path and query, the
// body and the end-to-end headers, with the daemon's token instead of the
// client's and without hop-by-hop, Forwarded or X-Forwarded-* headers; the
// client gets the agent's status, body and end-to-end headers.
func TestForwardHeaders(t *testing.T) {
	var got *http.Request
	var gotBody string
	g := newForwardRig(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody = r, string(b)
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("X-Private", "agent's")
		w.Header().Set("X-Reply", "yes")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	req, _ := http.NewRequest(http.MethodPost, g.front.URL+"/agents/master/tasks?wait=10s&x=%2F", strings.NewReader(`{"task_id":"t1"}`))
	req.Header.Set("Authorization", "Bearer client-token")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "client's")
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	req.Header.Set("Forwarded", "for=203.0.113.9")
	req.Header.Set("Proxy-Authorization", "Basic eA==")
	req.Header.Set("X-Request-Id", "r-1")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || string(body) != `{"ok":true}` {
		t.Fatalf("client got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Reply") != "yes" || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Private") != "" {
		t.Errorf("client's headers: %v", resp.Header)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/agents/master/tasks" || got.URL.RawQuery != "wait=10s&x=%2F" || gotBody != `{"task_id":"t1"}` {
		t.Errorf("agent got %s %s?%s %q", got.Method, got.URL.Path, got.URL.RawQuery, gotBody)
	}
	want := map[string]string{"Authorization": "Bearer daemon-token", "X-Request-Id": "r-1",
		"X-Hop": "", "X-Forwarded-For": "", "Forwarded": "", "Proxy-Authorization": "", "Connection": ""}
	for k, v := range want {
		if g := got.Header.Get(k); g != v {
			t.Errorf("agent's header %s = %q, want %q", k, g, v)
		}
	}
	if m := got.Header.Values("X-Multi"); len(m) != 2 || m[0] != "a" || m[1] != "b" {
		t.Errorf("agent's X-Multi = %q", m)
	}
	if got.ContentLength != int64(len(gotBody)) {
		t.Errorf("agent's Content-Length %d for %d bytes", got.ContentLength, len(gotBody))
	}
}

// TestForwardKeepsConnection: sequential requests reuse one connection to
// the agent, and one the agent closed while it was idle (an agent that
// restarted on the same port) is replaced without the client seeing it.
func TestForwardKeepsConnection(t *testing.T) {
	g := newForwardRig(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	post := func(body string) {
		t.Helper()
		resp, err := http.Post(g.front.URL+"/agents/master/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != body {
			t.Fatalf("%d %q, want 200 %q", resp.StatusCode, b, body)
		}
	}
	for i := range 5 {
		post(strings.Repeat("x", i*1000))
	}
	if n := g.conns.Load(); n != 1 {
		t.Fatalf("5 sequential requests took %d connections to the agent, want 1", n)
	}
	g.agent.CloseClientConnections()
	post("after the agent closed the idle connection")
	if n := g.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestForwardClientGone: a client that goes away while the agent holds its
// request (a long ?wait) ends the agent's side of it too.
func TestForwardClientGone(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	g := newForwardRig(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // as the agent's API does: only then does its server watch the connection
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(30 * time.Second):
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.front.URL+"/agents/master/tasks?wait=30s", strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent's request was not cancelled when the client went away")
	}
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
}

// TestForwardStreams: an answer of unknown length reaches the client as
// the agent writes it, not when it ends.
func TestForwardStreams(t *testing.T) {
	release := make(chan struct{})
	g := newForwardRig(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "second\n")
	})
	defer close(release)
	resp, err := http.Get(g.front.URL + "/agents/master/progress")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
}

// TestForwardUnreachable: an agent that does not listen is an errForward
// (502 agent_unreachable from proxyAgent); a HEAD is answered without a
// body.
func TestForwardUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := &agentAuth{token: "x"}
	r := httptest.NewRequest(http.MethodGet, "/agents/master/current", nil)
	w := httptest.NewRecorder()
	var fe errForward
	if err := a.forward(w, r, addr); !errors.As(err, &fe) {
		t.Fatalf("forward to a closed port: %v, want an errForward", err)
	}

	g := newForwardRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "hello")
		}
	})
	for range 3 { // HEAD leaves the connection usable
		resp, err := http.Head(g.front.URL + "/agents/master/current")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ContentLength != 5 {
			t.Fatalf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
		}
	}
	if n := g.conns.Load(); n != 1 {
		t.Fatalf("3 HEAD requests took %d connections to the agent, want 1", n)
	}
}

// TestForwardable: what takes the fast path and what goes through
// httputil.ReverseProxy.
func TestForwardable(t *testing.T) {
	for _, c := range []struct {
		name   string
		length int64
		te     []string
		up     string
		want   bool
	}{
		{"no body", 0, nil, "", true},
		{"task", 200, nil, "", true},
		{"largest", forwardMaxBody, nil, "", true},
		{"larger", forwardMaxBody + 1, nil, "", false},
		{"chunked", -1, []string{"chunked"}, "", false},
		{"upgrade", 0, nil, "websocket", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/agents/a/tasks", nil)
		r.ContentLength, r.TransferEncoding = c.length, c.te
		if c.up != "" {
			r.Header.Set("Upgrade", c.up)
		}
		if got := forwardable(r); got != c.want {
			t.Errorf("%s: forwardable %v, want %v", c.name, got, c.want)
		}
	}
}
