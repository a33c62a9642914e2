package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// gatedConn counts the writes that reach the connection and holds the
// first one until gate is closed.
type gatedConn struct {
	net.Conn
	gate   chan struct{}
	mu     sync.Mutex
	writes int
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	g.writes++
	first := g.writes == 1
	g.mu.Unlock()
	if first {
		<-g.gate
	}
	return g.Conn.Write(p)
}

// loopbackPair returns the two ends of a loopback TCP connection.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestBufferedConnCoalesces: the packets paho writes while a write is under
// way reach the socket together, in their order, and Close writes what is
// pending before it closes (paho's DISCONNECT is the last thing it writes
// before Close).
func TestBufferedConnCoalesces(t *testing.T) {
	cl, srv := loopbackPair(t)
	g := &gatedConn{Conn: cl, gate: make(chan struct{})}
	c := newBufferedConn(g)
	var want bytes.Buffer
	wrote := make(chan error, 1)
	go func() {
		for i := range 100 {
			p := []byte(fmt.Sprintf("packet %03d;", i))
			want.Write(p)
			if n, err := c.Write(p); n != len(p) || err != nil {
				wrote <- fmt.Errorf("Write %d: %d, %v", i, n, err)
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the Writes waited for the socket's first write, which was held")
		close(g.gate)
		<-wrote
		g.gate = nil
	}
	if g.gate != nil {
		close(g.gate) // the first write goes; the 99 others gathered behind it
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(srv)
		got <- b
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want.Bytes()) {
			t.Fatalf("the peer read %q, want %q", b, want.Bytes())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the peer read nothing to EOF within 30s")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.writes > 2 {
		t.Errorf("%d writes reached the socket, want at most 2 (the first, then those gathered behind it)", g.writes)
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// TestBufferedConnWriteError: a write that fails is returned by the next
// Write, and by every one after, so paho drops the connection.
func TestBufferedConnWriteError(t *testing.T) {
	cl, srv := loopbackPair(t)
	c := newBufferedConn(cl)
	srv.Close()
	cl.Close() // the writes fail from now on
	var err error
	for deadline := time.Now().Add(30 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = c.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("no Write failed within 30s of the connection's end")
	}
	if _, err2 := c.Write([]byte("y")); err2 == nil {
		t.Fatal("a Write after a failed one succeeded")
	}
}

// TestBufferedConnWriteTimeout: paho's write timeout (its SetWriteDeadline
// before each packet) bounds the flusher's writes to a peer that reads
// nothing.
func TestBufferedConnWriteTimeout(t *testing.T) {
	cl, _ := loopbackPair(t) // the server end never reads
	c := newBufferedConn(cl)
	p := make([]byte, 64<<10)
	var err error
	for deadline := time.Now().Add(60 * time.Second); err == nil && time.Now().Before(deadline); {
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = c.Write(p)
		_ = c.SetWriteDeadline(time.Time{})
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("writing to a peer that reads nothing: %v, want a timeout", err)
	}
}
