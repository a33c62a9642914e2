package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/testcert"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/redis/redistest"
)

var ctx = context.Background()

func client(t *testing.T, o Options) *Client {
	t.Helper()
	c := New(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func mustDo(t *testing.T, c *Client, args ...any) Reply {
	t.Helper()
	r, err := c.Do(ctx, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

func idle(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle)
}

func TestCommands(t *testing.T) {
	srv := redistest.Start(t, "always")
	c := client(t, Options{Addr: srv.Addr()})
	if r := mustDo(t, c, "PING"); string(r.Str) != "PONG" {
		t.Fatalf("PING: %+v", r)
	}
	value := []byte("a\r\nbinary\x00value")
	mustDo(t, c, "SET", "k", value)
	if b, err := mustDo(t, c, "GET", "k").Bytes(); string(b) != string(value) || err != nil {
		t.Fatalf("GET: %q, %v", b, err)
	}
	if _, err := mustDo(t, c, "GET", "missing").Bytes(); !errors.Is(err, ErrNil) {
		t.Fatalf("GET of a missing key: %v", err)
	}
	var e Error
	if _, err := c.Do(ctx, "HGET", "k", "f"); !errors.As(err, &e) || !strings.HasPrefix(string(e), "WRONGTYPE") {
		t.Fatalf("HGET of a string: %v", err)
	}
	// A server error leaves the connection usable.
	if idle(c) != 1 {
		t.Fatalf("%d idle connections after an error reply, want 1", idle(c))
	}
	rs, err := c.Pipeline(ctx, []any{"MULTI"}, []any{"INCR", "n"}, []any{"INCR", "n"}, []any{"EXEC"})
	if err != nil || len(rs) != 4 || string(rs[1].Str) != "QUEUED" || len(rs[3].Array) != 2 || rs[3].Array[1].Int != 2 {
		t.Fatalf("MULTI/EXEC: %+v, %v", rs, err)
	}

	// Many goroutines share the pool; it keeps at most PoolSize idle.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if r, err := c.Do(ctx, "INCR", "shared"); err != nil || r.Int == 0 {
					t.Errorf("goroutine %d: %+v, %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := mustDo(t, c, "GET", "shared"); string(n.Str) != "320" {
		t.Fatalf("320 INCRs counted %s", n.Str)
	}
	if idle(c) > c.Options().PoolSize {
		t.Fatalf("%d idle connections, pool size %d", idle(c), c.Options().PoolSize)
	}
	c.Close()
	if _, err := c.Do(ctx, "PING"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestScriptAfterFlush(t *testing.T) {
	srv := redistest.Start(t, "always")
	c := client(t, Options{Addr: srv.Addr()})
	s := NewScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
	for i, want := range []int64{5, 10, 15} {
		if i == 2 {
			mustDo(t, c, "SCRIPT", "FLUSH") // as after a restart: the server no longer knows the SHA
		}
		r, err := s.Run(ctx, c, []string{"n"}, 5)
		if err != nil || r.Int != want {
			t.Fatalf("run %d: %+v, %v; want %d", i, r, err, want)
		}
	}
	bad := NewScript("return redis.error_reply('OSCONFLICT 3')")
	if _, err := bad.Run(ctx, c, nil); err == nil || err.Error() != "OSCONFLICT 3" {
		t.Fatalf("a script's error reply: %v", err)
	}
}

func TestAuthAndDatabase(t *testing.T) {
	srv := redistest.Start(t, "always")
	admin := client(t, Options{Addr: srv.Addr()})
	mustDo(t, admin, "ACL", "SETUSER", "agent", "on", ">agentpw", "~*", "+@all")
	mustDo(t, admin, "CONFIG", "SET", "requirepass", "defaultpw")

	for _, tc := range []struct {
		url, fails string
	}{
		{"redis://:defaultpw@" + srv.Addr() + "/3", ""},
		{"redis://agent:agentpw@" + srv.Addr() + "/4", ""},
		{"redis://agent:wrong@" + srv.Addr(), "WRONGPASS"},
		{"redis://" + srv.Addr(), "NOAUTH"},
		{"redis://:defaultpw@" + srv.Addr() + "/99", "SELECT: ERR DB index is out of range"},
	} {
		u, _ := url.Parse(tc.url)
		o, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, o)
		_, err = c.Do(ctx, "SET", "where", tc.url)
		if tc.fails == "" && err != nil || tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)) {
			t.Errorf("%s: %v; want %q", tc.url, err, tc.fails)
		}
	}
	// Each wrote to its own database.
	for _, db := range []int{3, 4} {
		rs, err := admin.Pipeline(ctx, []any{"AUTH", "defaultpw"}, []any{"SELECT", db}, []any{"EXISTS", "where"})
		if err != nil || rs[2].Int != 1 {
			t.Errorf("database %d: %+v, %v", db, rs, err)
		}
	}
}

// TestIdleConnectionClosedByServer: an idle connection the server closed
// is not handed to the next command, which goes through a new one.
func TestIdleConnectionClosedByServer(t *testing.T) {
	srv := redistest.Start(t, "always")
	c := client(t, Options{Addr: srv.Addr()})
	id := mustDo(t, c, "CLIENT", "ID").Int
	killer := client(t, Options{Addr: srv.Addr()})
	if n := mustDo(t, killer, "CLIENT", "KILL", "ID", id).Int; n != 1 {
		t.Fatalf("CLIENT KILL: %d", n)
	}
	// The server closes the socket after it answered KILL.
	wait.For(t, 5*time.Second, "the end of the killed connection to reach the client", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.idle) == 1 && !open(c.idle[0].nc)
	})
	if again := mustDo(t, c, "CLIENT", "ID").Int; again == id {
		t.Fatalf("the killed connection %d was used again", id)
	}
}

// TestNeverSentTwice: a connection that fails in the middle of a command
// fails the command, which is not sent again, and is not reused.
func TestNeverSentTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var commands, conns atomic.Int32
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				if _, err := readReply(br); err == nil {
					commands.Add(1) // read, then the connection ends without an answer
				}
			}()
		}
	}()
	c := client(t, Options{Addr: ln.Addr().String()})
	for i := range 2 {
		if _, err := c.Do(ctx, "SET", "k", "v"); err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("command %d: %v; want the connection's end", i, err)
		}
		if idle(c) != 0 {
			t.Fatal("a failed connection went back to the pool")
		}
	}
	if commands.Load() != 2 || conns.Load() != 2 {
		t.Fatalf("the server read %d commands on %d connections, want 2 on 2", commands.Load(), conns.Load())
	}
}

// TestDeadlines: a reply that does not come fails the command at the
// context's deadline, or at ReadTimeout without one, and the connection is
// not reused.
func TestDeadlines(t *testing.T) {
	srv := redistest.Start(t, "always")
	c := client(t, Options{Addr: srv.Addr(), ReadTimeout: 300 * time.Millisecond})
	mustDo(t, c, "PING")

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Do(cctx, "BLPOP", "nothing", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BLPOP past the context's deadline: %v", err)
	}
	var ne net.Error
	if _, err := c.Do(ctx, "BLPOP", "nothing", 0); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("BLPOP past ReadTimeout: %v", err)
	}
	cctx, cancel = context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Do(cctx, "BLPOP", "nothing", 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("BLPOP cancelled: %v", err)
	}
	if idle(c) != 0 {
		t.Fatal("an interrupted connection went back to the pool")
	}
	// Nothing is left behind: the next command answers.
	if r := mustDo(t, c, "PING"); string(r.Str) != "PONG" {
		t.Fatalf("PING after the timeouts: %+v", r)
	}
}

func TestTLS(t *testing.T) {
	certs := testcert.Write(t, t.TempDir(), "redis")
	srv := redistest.StartTLS(t, certs.CA, certs.Cert, certs.Key)
	u, _ := url.Parse("rediss://" + srv.TLSAddr() + "/1")
	o, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if o.TLS == nil || o.TLS.ServerName != "127.0.0.1" || o.TLS.MinVersion != tls.VersionTLS12 {
		t.Fatalf("rediss:// TLS config %+v", o.TLS)
	}
	// The system's roots do not know the test's CA.
	if _, err := client(t, o).Do(ctx, "PING"); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("PING with an unknown CA: %v", err)
	}
	o.TLS.RootCAs = certs.Pool(t)
	c := client(t, o)
	mustDo(t, c, "SET", "over", "tls")
	if b, _ := mustDo(t, c, "GET", "over").Bytes(); string(b) != "tls" {
		t.Fatalf("GET over TLS: %q", b)
	}
	// Over TLS an idle connection is not peeked at: the pool reuses it.
	a, b := mustDo(t, c, "CLIENT", "ID").Int, mustDo(t, c, "CLIENT", "ID").Int
	if a != b {
		t.Fatalf("two commands in a row used connections %d and %d", a, b)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Options
		err  string
	}{
		{"redis://", Options{Addr: "localhost:6379"}, ""},
		{"redis://h:7000/2?dial_timeout=2s&read_timeout=1s&write_timeout=500ms&pool_size=2",
			Options{Addr: "h:7000", DB: 2, DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: 500 * time.Millisecond, PoolSize: 2}, ""},
		{"redis://u:p%40ss@[::1]:6380", Options{Addr: "[::1]:6380", Username: "u", Password: "p@ss"}, ""},
		{"redis://:secret@h", Options{Addr: "h:6379", Password: "secret"}, ""},
		{"http://h", Options{}, `scheme "http"`},
		{"redis://h/x", Options{}, `database "x"`},
		{"redis://h?dial_timeout=soon", Options{}, "dial_timeout"},
		{"redis://h?pool_size=0", Options{}, "pool_size"},
		{"redis://h?max_retries=3", Options{}, `unknown parameter "max_retries"`},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseURL(u)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
