package daemon

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/connpass"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestConnPass: the daemon's side of the hand-off against an agent's end
// played by the test: a request for an agent hands the client's socket over
// with the bytes read; a connection the agent holds keeps its place under
// the listener's cap until the agent says it is closed; one handed back is
// served by the daemon; the end of the agent's process frees every place
// it held. (Run under -race: the end-to-end tests run the daemon's binary,
// which is not.)
func TestConnPass(t *testing.T) {
	p := newConnPass(connpass.Settings{}, zerolog.New(zerolog.NewTestWriter(t)))
	ls := LaunchSpec{AgentID: "a"}
	lk := p.attach(&ls)
	if lk == nil || len(ls.Files) != 1 || !strings.HasPrefix(ls.Env[0], connpass.EnvHandoff+`={"fd":3`) {
		t.Fatalf("attach: %v %+v", lk, ls)
	}
	fd, err := syscall.Dup(int(ls.Files[0].Fd()))
	ls.Files[0].Close()
	if err != nil {
		t.Fatal(err)
	}
	agent, err := connpass.Open(uintptr(fd))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	lk.start()
	defer lk.close()
	if err := agent.Send(connpass.Message{Kind: connpass.KindReady}, nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the link ready", lk.ready.Load)

	hd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/agents/") && passable(r) && p.handOff(w, r, lk) {
			return
		}
		_, _ = io.WriteString(w, "daemon "+r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := httpx.Limits{MaxConns: 2}
	srv := httpx.NewServer(hd, limits)
	go func() { _ = srv.Serve(httpx.Listen(ln, limits, false, zerolog.Nop())) }()
	defer srv.Close()
	again := httpx.NewServer(hd, limits)
	again.ConnContext = connpass.ConnContext
	go func() { _ = again.Serve(p.ln) }()
	defer again.Close()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, path string) (int, string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	// The agent's side: take a connection, check its bytes, answer.
	take := func(wantPrefix string) (connpass.Message, net.Conn) {
		t.Helper()
		m, f, err := agent.Recv()
		if err != nil || m.Kind != connpass.KindConn || !strings.HasPrefix(string(m.Data), wantPrefix) {
			t.Fatalf("agent received %c %q %v", m.Kind, m.Data, err)
		}
		sock, err := connpass.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sock.Close() })
		if _, err := io.WriteString(sock, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagent"); err != nil {
			t.Fatal(err)
		}
		return m, sock
	}

	c1, br1 := dial()
	done := make(chan string, 1)
	go func() { _, body := get(c1, br1, "/agents/a/one"); done <- body }()
	m1, sock1 := take("GET /agents/a/one HTTP/1.1\r\n")
	if body := <-done; body != "agent" {
		t.Fatalf("first: %q", body)
	}
	c2, br2 := dial()
	go func() { _, body := get(c2, br2, "/agents/a/two"); done <- body }()
	m2, sock2 := take("GET /agents/a/two HTTP/1.1\r\n")
	if body := <-done; body != "agent" {
		t.Fatalf("second: %q", body)
	}
	// Both places are the agent's: one more connection is refused.
	c3, br3 := dial()
	if code, body := get(c3, br3, "/status"); code != http.StatusServiceUnavailable {
		t.Fatalf("over the cap: %d %s", code, body)
	}
	// The agent closes the first: its place is free.
	sock1.Close()
	if err := agent.Send(connpass.Message{Kind: connpass.KindClosed, ID: m1.ID}, nil); err != nil {
		t.Fatal(err)
	}
	err = wait.Poll(10*time.Second, func() error {
		c, br := dial()
		defer c.Close()
		if code, body := get(c, br, "/status"); code != http.StatusOK {
			return &net.OpError{Op: body}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no place freed by the agent's closed message: %v", err)
	}
	// The agent reads the next request of the second and hands the
	// connection back with it: the daemon answers it, and the connection
	// goes on.
	go func() { _, body := get(c2, br2, "/status"); done <- body }()
	req := make([]byte, 0, 256)
	for !strings.HasSuffix(string(req), "\r\n\r\n") {
		b := make([]byte, 1)
		if _, err := sock2.Read(b); err != nil {
			t.Fatal(err)
		}
		req = append(req, b[0])
	}
	if err := agent.Send(connpass.Message{Kind: connpass.KindBack, ID: m2.ID, Data: req}, sock2); err != nil {
		t.Fatal(err)
	}
	sock2.Close()
	if body := <-done; body != "daemon /status" {
		t.Fatalf("handed back: %q", body)
	}
	if code, body := get(c2, br2, "/healthz"); code != 200 || body != "daemon /healthz" {
		t.Fatalf("after the hand-back: %d %q", code, body)
	}
	// An id the agent does not hold is refused.
	if err := agent.Send(connpass.Message{Kind: connpass.KindClosed, ID: 999}, nil); err != nil {
		t.Fatal(err)
	}
	// The daemon hands c2 over again; the agent's process ends: its place
	// is freed.
	go func() { _, body := get(c2, br2, "/agents/a/three"); done <- body }()
	_, sock3 := take("GET /agents/a/three HTTP/1.1\r\n")
	if body := <-done; body != "agent" {
		t.Fatalf("third: %q", body)
	}
	sock3.Close()
	agent.Close()
	err = wait.Poll(10*time.Second, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.held) != 0 {
			return &net.OpError{Op: "held"}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("places still held after the agent ended: %v", err)
	}
}

func TestPassable(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  string
		want bool
	}{
		{"a task", "POST /agents/a/tasks HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", true},
		{"a GET", "GET /agents/a/tasks/t HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"HTTP/1.0 kept alive", "GET /agents/a/tasks/t HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
		{"closing", "GET /agents/a/tasks/t HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false},
		{"HTTP/1.0", "GET /agents/a/tasks/t HTTP/1.0\r\n\r\n", false},
		{"chunked", "POST /agents/a/tasks HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
		{"large", "POST /agents/a/tasks HTTP/1.1\r\nHost: h\r\nContent-Length: 70000\r\n\r\n", false},
		{"upgrade", "GET /agents/a/x HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"a browser's cookie", "GET /agents/a/tasks/t HTTP/1.1\r\nHost: h\r\nCookie: s=1\r\n\r\n", false},
		{"a browser's fetch", "GET /agents/a/tasks/t HTTP/1.1\r\nHost: h\r\nSec-Fetch-Site: same-origin\r\n\r\n", false},
		{"an origin", "POST /agents/a/tasks HTTP/1.1\r\nHost: h\r\nOrigin: http://h\r\nContent-Length: 2\r\n\r\n{}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.req)))
			if err != nil {
				t.Fatal(err)
			}
			if got := passable(r); got != tc.want {
				t.Fatalf("passable = %v, want %v", got, tc.want)
			}
		})
	}
}
