package httpx

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// serve runs h on a loopback listener with limits l until the test ends.
func serve(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, l)
	go func() { _ = srv.Serve(Listen(ln, l, false, zerolog.New(zerolog.NewTestWriter(t)))) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// oneLineError checks that body is exactly one line of {"error","code"}.
func oneLineError(t *testing.T, body []byte, code string) {
	t.Helper()
	if bytes.Count(body, []byte("\n")) != 1 || !bytes.HasSuffix(body, []byte("\n")) {
		t.Fatalf("not one line: %q", body)
	}
	var e struct{ Error, Code string }
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code != code || e.Error == "" {
		t.Fatalf("body %q: %v, want code %s", body, err, code)
	}
}

// TestRoutes: unknown routes and wrong methods answer one-line JSON.
func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /a/{id}", func(w http.ResponseWriter, r *http.Request) { JSON(w, 200, map[string]string{"id": r.PathValue("id")}) })
	mux.HandleFunc("POST /b", func(w http.ResponseWriter, r *http.Request) { Error(w, 409, "conflict", "ünïcödé id é") })
	addr := serve(t, Routes(mux), Limits{})
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
		allow        string
	}{
		{"GET", "/nope", 404, CodeNotFound, ""},
		{"GET", "/", 404, CodeNotFound, ""},
		{"DELETE", "/a/x", 405, CodeMethodNotAllowed, "GET, HEAD"},
		{"GET", "/b", 405, CodeMethodNotAllowed, "POST"},
		{"POST", "/b", 409, "conflict", ""},
		{"GET", "/a/x", 200, "", ""},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if tc.allow != "" && resp.Header.Get("Allow") != tc.allow {
			t.Fatalf("%s %s: Allow %q", tc.method, tc.path, resp.Header.Get("Allow"))
		}
		if tc.code != "" {
			oneLineError(t, body, tc.code)
		}
		if tc.status == 409 && !strings.Contains(string(body), "ünïcödé id é") {
			t.Fatalf("non-ASCII mangled: %q", body)
		}
	}
}

// TestTooLarge: a body ten times... forty times over the limit is answered
// 400 too_large every time, never a reset.
func TestTooLarge(t *testing.T) {
	const limit = 256 << 10
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ReadBody(w, r, limit); errors.Is(err, ErrTooLarge) {
			Error(w, 400, CodeTooLarge, "too large")
			return
		}
		JSON(w, 202, "ok")
	}), Limits{})
	big := bytes.Repeat([]byte("x"), 10<<20)
	for i := range 6 {
		resp, err := http.Post("http://"+addr+"/", "application/json", bytes.NewReader(big))
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("try %d: %d %q", i, resp.StatusCode, body)
		}
		oneLineError(t, body, CodeTooLarge)
	}
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("small body: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestSlowBodyCut: a body sent a byte at a time is cut at BodyTimeout; an
// answer that takes longer than BodyTimeout after the body is not.
func TestSlowBodyCut(t *testing.T) {
	const bodyTimeout = 300 * time.Millisecond
	readErr := make(chan error, 16)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			Error(w, 400, CodeBadBody, err.Error())
			return
		}
		select {
		case <-time.After(3 * bodyTimeout): // a long answer, e.g. a task waited for
			JSON(w, 200, "done")
		case <-r.Context().Done():
			readErr <- r.Context().Err()
		}
	}), Limits{BodyTimeout: bodyTimeout})

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, c) // until the server closes
		closed <- time.Since(start)
	}()
	sent := 0
	for sent < 100 {
		if _, err := c.Write([]byte("x")); err != nil {
			break
		}
		sent++
		select {
		case <-closed:
			sent = -sent
		case <-time.After(100 * time.Millisecond):
		}
		if sent < 0 {
			break
		}
	}
	if sent >= 0 {
		select {
		case d := <-closed:
			t.Logf("closed after %v", d)
		case <-time.After(5 * time.Second):
			t.Fatal("a slow body held its connection past the body timeout")
		}
	} else {
		t.Logf("closed after %d bytes", -sent)
	}
	if sent >= 100 || sent < -20 {
		t.Fatalf("the slow body was not cut in time (%d bytes sent)", sent)
	}
	if err := <-readErr; err == nil {
		t.Fatal("the handler read the slow body without error")
	}

	// A quick body, then an answer slower than the body timeout.
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("quick"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("long answer: %d %q", resp.StatusCode, body)
	}
	select {
	case err := <-readErr:
		if err != nil {
			t.Fatal(err)
		}
	default:
	}
	select {
	case err := <-readErr:
		t.Fatalf("the long answer's context ended: %v", err)
	default:
	}
}

// TestConnectionCap: with MaxConns open connections, one more is answered
// 503 too_many_connections; idle connections are closed at
// ReadHeaderTimeout, which frees the cap.
func TestConnectionCap(t *testing.T) {
	const max = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limits{MaxConns: max, ReadHeaderTimeout: 500 * time.Millisecond}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { JSON(w, 200, "ok") }), l)
	capped := Listen(ln, l, false, zerolog.New(zerolog.NewTestWriter(t)))
	go func() { _ = srv.Serve(capped) }()
	defer srv.Close()
	addr := ln.Addr().String()

	var idle []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	get := func() (int, []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	// The accept loop may not have taken all idle ones yet: wait until it
	// refuses one (bounded).
	var code int
	var body []byte
	if wait.Poll(5*time.Second, func() error {
		if code, body = get(); code != 503 {
			return errors.New("not refused")
		}
		return nil
	}) != nil {
		t.Fatalf("over the cap: %d %q", code, body)
	}
	oneLineError(t, body, CodeBusy)
	if Refused(capped) == 0 {
		t.Fatal("refusal not counted")
	}
	// The idle connections are closed by the header timeout.
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, errTimeout(err)) {
			t.Fatalf("an idle connection was not closed: %v", err)
		}
	}
	if wait.Poll(5*time.Second, func() error {
		if code, _ = get(); code != 200 {
			return errors.New("refused")
		}
		return nil
	}) != nil {
		t.Fatal("the cap was not freed by closed connections")
	}
}

// errTimeout returns err when it is a timeout (the read deadline of the
// test, not the server's close), so that errors.Is matches it.
func errTimeout(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return errors.New("not a timeout")
}

func TestPretty(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      any
		status int
		want   string
	}{
		{"object", map[string]any{"a": 1, "b": "<x>"}, 200, "{\n  \"a\": 1,\n  \"b\": \"\\u003cx\\u003e\"\n}\n"},
		{"unencodable", func() {}, 500, `{"error":"encoding the answer: json: unsupported type: func()","code":"internal"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Pretty(w, 200, tc.v)
			if w.Code != tc.status || w.Body.String() != tc.want || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Type"))
			}
		})
	}
}

// selfEncoded is an Appender whose encoding json.Marshal would not write.
type selfEncoded struct{ err error }

func (s selfEncoded) AppendJSON(dst []byte) ([]byte, error) {
	return append(dst, `{"by":"AppendJSON"}`...), s.err
}

// JSON lets an Appender encode itself (no reflection), and answers its
// error as any encoding error; anything else goes through json.Marshal.
func TestJSONAppender(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      any
		status int
		want   string
	}{
		{"appender", selfEncoded{}, 202, `{"by":"AppendJSON"}` + "\n"},
		{"appender's error", selfEncoded{err: errors.New("boom")}, 500, `{"error":"encoding the answer: boom","code":"internal"}` + "\n"},
		{"other", map[string]any{"a": "<x>"}, 202, `{"a":"\u003cx\u003e"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			JSON(w, 202, tc.v)
			if w.Code != tc.status || w.Body.String() != tc.want || w.Header().Get("Content-Length") != fmt.Sprint(len(tc.want)) {
				t.Fatalf("%d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Length"))
			}
		})
	}
}
