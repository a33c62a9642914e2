// Package redistest starts real redis-server processes for tests: on a free
// loopback port, with their data in a t.TempDir, killed when the test ends.
//
// Tests of the Redis store never run against a fake. Without redis-server in
// PATH, Start fails the test with how to install it, unless the environment
// sets OPENSTARRY_SKIP_REDIS=1, which skips it instead.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// Server is a redis-server process a test started.
type Server struct {
	t     testing.TB
	bin   string
	dir   string
	port  int
	fsync string
	tls   []string // the TLS arguments of StartTLS
	tport int      // the TLS port of StartTLS
	cmd   *exec.Cmd
	mu    sync.Mutex // guards cmd
}

// Start starts redis-server on a free loopback port with its data in a
// fresh t.TempDir, persisting with appendonly yes and the given appendfsync,
// waits until it answers PING, and kills it when the test ends. fsync is the
// appendfsync setting: "always" for the store's durability promise,
// "everysec" or "no" to test its warning.
//
// Without redis-server in PATH the test fails, telling how to install it,
// unless OPENSTARRY_SKIP_REDIS=1 is set.
func Start(t testing.TB, fsync string) *Server {
	t.Helper()
	return start(t, &Server{t: t, fsync: fsync})
}

// StartTLS is Start with appendfsync always and, beside the plain port, a
// TLS port (TLSAddr) serving the certificate and key of PEM files signed
// by the CA in caFile; clients need no certificate.
func StartTLS(t testing.TB, caFile, certFile, keyFile string) *Server {
	t.Helper()
	s := &Server{t: t, fsync: "always", tport: loopback.FreePort(t)}
	s.tls = []string{"--tls-port", strconv.Itoa(s.tport), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"}
	return start(t, s)
}

func start(t testing.TB, s *Server) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("OPENSTARRY_SKIP_REDIS") == "1" {
			t.Skip("redis-server not found; skipped because OPENSTARRY_SKIP_REDIS=1")
		}
		t.Fatal("redis-server not found in PATH: the Redis store is tested against a real server. " +
			"Install it (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis), " +
			"or set OPENSTARRY_SKIP_REDIS=1 to skip these tests")
	}
	s.bin, s.dir = bin, t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken between picking and binding it
		s.port = loopback.FreePort(t)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// start runs the server on s.port and s.dir and waits for PING.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--appendonly", "yes", "--appendfsync", s.fsync,
		"--dir", s.dir, "--save", "", "--logfile", logPath}, s.tls...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	var exited error
	err := wait.Poll(10*time.Second, func() error {
		select {
		case err := <-done:
			exited = fmt.Errorf("exited: %v; log:\n%s", err, tail(logPath))
			return nil
		default:
		}
		return c.Ping(context.Background()).Err()
	})
	switch {
	case exited != nil:
		return exited
	case err != nil:
		cmd.Process.Kill()
		return fmt.Errorf("no PING answer in 10s; log:\n%s", tail(logPath))
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	go func() { <-done }()
	return nil
}

func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Kill stops the server with SIGKILL, as a crash would, and waits until its
// port is closed.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	_ = wait.Poll(10*time.Second, func() error { // the next start tells if it is still open
		c, err := net.DialTimeout("tcp", s.Addr(), 50*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		return errors.New("the port is still open")
	})
}

// Restart starts the server again on the same port and data directory.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// TLSAddr is the host:port of the TLS port of StartTLS.
func (s *Server) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.tport) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// PID is the server's process id, 0 while it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// URL returns the store URL of the server, database 0, with a key prefix.
func (s *Server) URL(prefix string) string {
	return "redis://" + s.Addr() + "/0?prefix=" + prefix
}

// Client returns a plain client of the server, for a test to look at or
// damage keys behind the store's back.
func (s *Server) Client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}
