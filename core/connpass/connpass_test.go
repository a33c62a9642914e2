package connpass

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want Message
		err  string
	}{
		{"ready", Message{Kind: KindReady}.Append(nil), Message{Kind: KindReady}, ""},
		{"stop", Message{Kind: KindStop}.Append(nil), Message{Kind: KindStop}, ""},
		{"closed", Message{Kind: KindClosed, ID: 7}.Append(nil), Message{Kind: KindClosed, ID: 7}, ""},
		{"conn", Message{Kind: KindConn, ID: 1 << 40, Data: []byte("GET / HTTP/1.1\r\n\r\n")}.Append(nil),
			Message{Kind: KindConn, ID: 1 << 40, Data: []byte("GET / HTTP/1.1\r\n\r\n")}, ""},
		{"back", Message{Kind: KindBack, ID: 2, Data: []byte("x")}.Append(nil), Message{Kind: KindBack, ID: 2, Data: []byte("x")}, ""},
		{"empty", nil, Message{}, "shorter than its header"},
		{"short", []byte{1, 'R', 0, 0}, Message{}, "shorter than its header"},
		{"version", append([]byte{2, 'R'}, make([]byte, 8)...), Message{}, "unknown message version"},
		{"kind", append([]byte{1, 'Q'}, make([]byte, 8)...), Message{}, "unknown message kind"},
		{"ready with id", Message{Kind: KindReady, ID: 1}.Append(nil), Message{}, "with an ID or data"},
		{"ready with data", append(Message{Kind: KindReady}.Append(nil), 'x'), Message{}, "with an ID or data"},
		{"closed without id", Message{Kind: KindClosed}.Append(nil), Message{}, "without an ID"},
		{"conn without id", Message{Kind: KindConn, Data: []byte("x")}.Append(nil), Message{}, "without an ID or bytes"},
		{"conn without bytes", Message{Kind: KindConn, ID: 3}.Append(nil), Message{}, "without an ID or bytes"},
		{"too long", Message{Kind: KindConn, ID: 3, Data: make([]byte, MaxMessage)}.Append(nil), Message{}, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Decode = %+v, %v; want an error with %q", m, err, tc.err)
				}
				return
			}
			if err != nil || m.Kind != tc.want.Kind || m.ID != tc.want.ID || !bytes.Equal(m.Data, tc.want.Data) {
				t.Fatalf("Decode = %+v, %v; want %+v", m, err, tc.want)
			}
		})
	}
}

// FuzzDecode: any bytes decode to a message or an error, never a panic,
// and a message decoded encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(Message{Kind: KindReady}.Append(nil))
	f.Add(Message{Kind: KindClosed, ID: 9}.Append(nil))
	f.Add(Message{Kind: KindConn, ID: 1, Data: []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")}.Append(nil))
	f.Add([]byte{1, 'B', 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if got := m.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("Decode(%q) = %+v, which encodes to %q", b, m, got)
		}
	})
}

// TestTakeReplays: a connection taken out of one server in the middle of a
// request, with a body and a second request pipelined behind it, is served
// whole by another server fed by a Listener: the bytes the first read are
// served first, in order.
func TestTakeReplays(t *testing.T) {
	second := NewListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer second.Close()
	srv2 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "second %s %s %s host=%s x=%s", r.Method, r.RequestURI, body, r.Host, r.Header.Get("X-Test"))
	}), ConnContext: ConnContext}
	go func() { _ = srv2.Serve(second) }()
	defer srv2.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan Taken, 1)
	srv1 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tk, err := Take(w, r)
		if err != nil {
			t.Errorf("Take: %v", err)
			return
		}
		if _, ok := tk.Sock.(*net.TCPConn); !ok {
			t.Errorf("Sock is %T", tk.Sock)
		}
		taken <- tk
		if !second.Put(NewConn(tk.Sock, 1, tk.Data, nil)) {
			t.Error("Put refused")
		}
	})}
	go func() { _ = srv1.Serve(ln) }()
	defer srv1.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("b", 6000) // more than the first server's reader holds
	reqs := "POST /a?q=1 HTTP/1.1\r\nHost: example.test\r\nX-Test: one\r\nContent-Length: 5\r\n\r\nhello" +
		"PUT /b HTTP/1.1\r\nHost: example.test\r\nX-Test: two\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big +
		"GET /c HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	if _, err := io.WriteString(c, reqs); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for _, want := range []string{"second POST /a?q=1 hello host=example.test x=one",
		"second PUT /b " + big + " host=example.test x=two", "second GET /c abc host=example.test x="} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != want {
			t.Fatalf("answer %.80q, want %.80q", got, want)
		}
	}
	tk := <-taken
	if !strings.HasPrefix(string(tk.Data), "POST /a?q=1 HTTP/1.1\r\nHost: example.test\r\n") {
		t.Fatalf("taken bytes start %q", tk.Data[:40])
	}
}

// TestTakeTLS: a TLS connection's socket is not given out as the client's
// bytes: Take stops at the *tls.Conn.
func TestTakeTLS(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tc := tls.Server(a, &tls.Config{})
	w := &hijacker{c: tc}
	tk, err := Take(w, httpRequest(t, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Sock != net.Conn(tc) {
		t.Fatalf("Sock is %T, want the *tls.Conn itself", tk.Sock)
	}
}

type hijacker struct {
	http.ResponseWriter
	c net.Conn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.c, bufio.NewReadWriter(bufio.NewReader(h.c), bufio.NewWriter(h.c)), nil
}

func httpRequest(t *testing.T, s string) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(s)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestListenerClosed(t *testing.T) {
	l := NewListener(nil)
	l.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if l.Put(a) {
		t.Fatal("Put on a closed listener")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept: %v", err)
	}
}
