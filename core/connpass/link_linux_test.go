package connpass

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// pair returns both ends of a pair as Links.
func pair(t *testing.T) (daemon, agent *Link) {
	t.Helper()
	d, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(child.Fd()))
	child.Close()
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(uintptr(fd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

// tcpPair is the two ends of one loopback TCP connection; the client's is
// closed at the end of the test (the server's is the test's to pass on).
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// TestLinkPassesSocket: a TCP connection sent with a message arrives as a
// socket of the other end's own, which carries the client's bytes both
// ways after the sender closed its own.
func TestLinkPassesSocket(t *testing.T) {
	d, a := pair(t)
	client, server := tcpPair(t)
	if err := d.Send(Message{Kind: KindConn, ID: 42, Data: []byte("read already")}, server); err != nil {
		t.Fatal(err)
	}
	server.Close()
	m, f, err := a.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindConn || m.ID != 42 || string(m.Data) != "read already" || f == nil {
		t.Fatalf("Recv = %+v, %v", m, f)
	}
	c, err := FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("remote address %s, want the client's %s", c.RemoteAddr(), client.LocalAddr())
	}
	if _, err := io.WriteString(c, "pong"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("client read %q %v", buf, err)
	}
	// Messages without a socket, both ways; the end of one end is io.EOF
	// at the other.
	if err := a.Send(Message{Kind: KindClosed, ID: 42}, nil); err != nil {
		t.Fatal(err)
	}
	if m, f, err := d.Recv(); err != nil || m.Kind != KindClosed || m.ID != 42 || f != nil {
		t.Fatalf("Recv = %+v, %v, %v", m, f, err)
	}
	a.Close()
	if _, _, err := d.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the other end closed: %v", err)
	}
}

// TestLinkDropsBadMessages: a message that does not decode, or a Conn
// without its socket, is an error that closes whatever came with it, and
// the next message is read.
func TestLinkDropsBadMessages(t *testing.T) {
	d, a := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Garbage with a descriptor attached.
	if _, _, err := d.c.WriteMsgUnix([]byte("garbage!!!!!"), syscall.UnixRights(int(r.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := d.Send(Message{Kind: KindReady}, nil); err != nil {
		t.Fatal(err)
	}
	// A Conn without a socket.
	if _, _, err := d.c.WriteMsgUnix(Message{Kind: KindConn, ID: 1, Data: []byte("x")}.Append(nil), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, f, err := a.Recv(); !errors.Is(err, ErrDropped) || f != nil {
		t.Fatalf("garbage: %v %v", f, err)
	}
	if m, _, err := a.Recv(); err != nil || m.Kind != KindReady {
		t.Fatalf("after garbage: %+v %v", m, err)
	}
	if _, f, err := a.Recv(); !errors.Is(err, ErrDropped) || f != nil {
		t.Fatalf("a Conn without a socket: %v %v", f, err)
	}
	// The descriptor that came with the garbage was closed: the pipe's
	// writer sees no reader left.
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to the pipe whose reader was sent with garbage: %v, want EPIPE", err)
	}
}

// TestAgentMine: the agent answers a request of a handed connection only
// as the daemon would have passed it; everything else goes back. The
// remote addresses are made up (httptest): loopback, and off loopback.
func TestAgentMine(t *testing.T) {
	sum := sha256.Sum256([]byte("the-http-token-0123"))
	a := &agentSide{o: AgentOptions{AgentID: "master", Settings: Settings{Hosts: []string{"api.example"}}},
		prefix: "/agents/master/", tokenHash: sum[:]}
	for _, tc := range []struct {
		name   string
		method string
		target string
		remote string
		hdr    map[string]string
		want   bool
	}{
		{"loopback", "GET", "/agents/master/tasks/t1", "127.0.0.1:5000", nil, true},
		{"loopback v6", "POST", "/agents/master/tasks", "[::1]:5000", nil, true},
		{"off loopback, no token", "GET", "/agents/master/tasks/t1", "10.0.0.9:5000", nil, false},
		{"off loopback, wrong token", "GET", "/agents/master/tasks/t1", "10.0.0.9:5000", map[string]string{"Authorization": "Bearer nope"}, false},
		{"off loopback, not bearer", "GET", "/agents/master/tasks/t1", "10.0.0.9:5000", map[string]string{"Authorization": "Basic the-http-token-0123"}, false},
		{"off loopback, token", "GET", "/agents/master/tasks/t1", "10.0.0.9:5000", map[string]string{"Authorization": "Bearer the-http-token-0123"}, true},
		{"another agent", "GET", "/agents/w9/tasks/t1", "127.0.0.1:5000", nil, false},
		{"an agent whose id starts the same", "GET", "/agents/masterx/tasks", "127.0.0.1:5000", nil, false},
		{"the agent's root", "GET", "/agents/master", "127.0.0.1:5000", nil, false},
		{"status", "GET", "/status", "127.0.0.1:5000", nil, false},
		{"unclean", "GET", "/agents/master/../w9/tasks", "127.0.0.1:5000", nil, false},
		{"double slash", "GET", "/agents/master//tasks", "127.0.0.1:5000", nil, false},
		{"escaped slash", "GET", "/agents/master/a%2Fb", "127.0.0.1:5000", nil, false},
		{"allowed host", "GET", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Host": "api.example:7777"}, true},
		{"other host", "GET", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Host": "rebind.example"}, false},
		{"cookie", "GET", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Cookie": "openstarry_session=x"}, false},
		{"origin", "POST", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Origin": "http://127.0.0.1"}, false},
		{"fetch site", "POST", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Sec-Fetch-Site": "same-origin"}, false},
		{"upgrade", "GET", "/agents/master/tasks", "127.0.0.1:5000", map[string]string{"Upgrade": "websocket"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, nil)
			r.RemoteAddr = tc.remote
			r.Host = "127.0.0.1:7777"
			for k, v := range tc.hdr {
				if k == "Host" {
					r.Host = v
				} else {
					r.Header.Set(k, v)
				}
			}
			if got := a.mine(r); got != tc.want {
				t.Fatalf("mine = %v, want %v", got, tc.want)
			}
		})
	}
	// Without http.token, loopback or not is all one.
	a.tokenHash = nil
	r := httptest.NewRequest("GET", "/agents/master/tasks", nil)
	r.RemoteAddr, r.Host = "10.0.0.9:5000", "127.0.0.1:7777"
	if !a.mine(r) {
		t.Fatal("without a token, a request from off loopback goes back")
	}
}

// TestAgentHeaders: a request the agent takes reaches its API as the
// daemon's forward sends it: the client's Authorization, Forwarded,
// X-Forwarded-* and hop-by-hop headers dropped, the daemon's token given,
// the agent's own address as the Host.
func TestAgentHeaders(t *testing.T) {
	var got *http.Request
	a := &agentSide{o: AgentOptions{AgentID: "master", LocalToken: "per-boot", Addr: "127.0.0.1:4000",
		API: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r })}, prefix: "/agents/master/"}
	r := httptest.NewRequest("POST", "/agents/master/tasks", nil)
	r.RemoteAddr, r.Host = "127.0.0.1:5000", "127.0.0.1:7777"
	for k, v := range map[string]string{"Authorization": "Bearer client", "Forwarded": "for=1.2.3.4", "X-Forwarded-For": "1.2.3.4",
		"Connection": "X-Private", "X-Private": "p", "Keep-Alive": "timeout=5", "Te": "trailers", "X-Keep": "k",
		"X-Openstarry-Plan-Token": "plan"} {
		r.Header.Set(k, v)
	}
	a.ServeHTTP(httptest.NewRecorder(), r)
	if got == nil {
		t.Fatal("not served")
	}
	want := http.Header{"Authorization": {"Bearer per-boot"}, "X-Keep": {"k"}, "X-Openstarry-Plan-Token": {"plan"}}
	if len(got.Header) != len(want) {
		t.Fatalf("headers %v, want %v", got.Header, want)
	}
	for k, v := range want {
		if got.Header.Get(k) != v[0] {
			t.Fatalf("headers %v, want %v", got.Header, want)
		}
	}
	if got.Host != "127.0.0.1:4000" {
		t.Fatalf("Host %q", got.Host)
	}
}

// TestServe: the agent's side against a daemon played by the test: it says
// it is ready, serves a handed connection (the bytes read first) with its
// API under the daemon's token, hands back a request that is not its own
// with that request's bytes, says when a connection it holds closes, and
// says it stops.
func TestServe(t *testing.T) {
	d, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fd, err := syscall.Dup(int(child.Fd()))
	child.Close()
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body)+" "+r.Header.Get("Authorization"))
	})
	stop, err := Serve(AgentOptions{Settings: Settings{FD: fd}, AgentID: "a", LocalToken: "per-boot", API: api, Addr: "127.0.0.1:4000"})
	if err != nil {
		t.Fatal(err)
	}
	if m, _, err := d.Recv(); err != nil || m.Kind != KindReady {
		t.Fatalf("first message %+v %v, want Ready", m, err)
	}
	client, server := tcpPair(t)
	// The daemon read the head and part of the body; the rest comes from
	// the client.
	if err := d.Send(Message{Kind: KindConn, ID: 5, Data: []byte("POST /agents/a/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer client\r\nContent-Length: 5\r\n\r\nhe")}, server); err != nil {
		t.Fatal(err)
	}
	server.Close()
	if _, err := io.WriteString(client, "llo"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "POST /agents/a/tasks hello Bearer per-boot" {
		t.Fatalf("the agent answered %q", body)
	}
	// Not the agent's: back to the daemon, with its bytes.
	if _, err := io.WriteString(client, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	m, f, err := d.Recv()
	if err != nil || m.Kind != KindBack || m.ID != 5 || !strings.HasPrefix(string(m.Data), "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n") || f == nil {
		t.Fatalf("handed back %c %d %q %v", m.Kind, m.ID, m.Data, err)
	}
	back, err := FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	if back.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("handed back %s, want the client's socket %s", back.RemoteAddr(), client.LocalAddr())
	}
	// The daemon hands it over again; the client closes it: the agent says
	// so.
	if err := d.Send(Message{Kind: KindConn, ID: 5, Data: []byte("GET /agents/a/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")}, back); err != nil {
		t.Fatal(err)
	}
	back.Close()
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.Close()
	if m, _, err := d.Recv(); err != nil || m.Kind != KindClosed || m.ID != 5 {
		t.Fatalf("after the client closed: %+v %v, want Closed 5", m, err)
	}
	stop(t.Context())
	if m, _, err := d.Recv(); err != nil || m.Kind != KindStop {
		t.Fatalf("at stop: %+v %v, want Stop", m, err)
	}
	if _, _, err := d.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after stop: %v, want io.EOF", err)
	}
}

// TestFromEnv: the settings are read, the variable removed, and the
// descriptor marked closed on exec (syscall.Dup leaves it inheritable, as
// exec.Cmd.ExtraFiles does in the child).
func TestFromEnv(t *testing.T) {
	_, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	fd, err := syscall.Dup(int(child.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	flags := func() uintptr {
		v, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno != 0 {
			t.Fatal(errno)
		}
		return v
	}
	if flags()&syscall.FD_CLOEXEC != 0 {
		t.Fatal("a dup is already closed on exec")
	}
	t.Setenv(EnvHandoff, `{"fd":`+strconv.Itoa(fd)+`,"hosts":["api.example"],"token_sha256":"`+HashToken("tok")+`"}`)
	s, err := FromEnv()
	if err != nil || s == nil || s.FD != fd || len(s.Hosts) != 1 || s.TokenSHA256 != HashToken("tok") {
		t.Fatalf("FromEnv = %+v, %v", s, err)
	}
	if _, ok := os.LookupEnv(EnvHandoff); ok {
		t.Fatal("the variable is still set")
	}
	if flags()&syscall.FD_CLOEXEC == 0 {
		t.Fatal("the descriptor is not closed on exec")
	}
	for _, bad := range []string{`{"fd":2}`, `{"fd":7,"token_sha256":"abc"}`, `not json`} {
		t.Setenv(EnvHandoff, bad)
		if s, err := FromEnv(); err == nil {
			t.Errorf("FromEnv(%s) = %+v", bad, s)
		}
	}
}
