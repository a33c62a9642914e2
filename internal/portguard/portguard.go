// Package portguard fails a test binary whose tests dial a default port of
// the product: 127.0.0.1:1883 (the embedded broker, and the broker a
// `make run` on this machine holds) or 127.0.0.1:7777 (the daemon's HTTP).
// A test that does reaches the user's own daemon and broker (issue #30:
// agents of the test suite joined a running `make run` as its device).
//
// Run holds each port that is free while the tests run, and keeps trying
// for one that is not (another package's test binary may hold it: `go test
// ./...` runs packages in parallel, and whichever holds it reports what
// dials it, naming the process). A connection is closed at once and
// recorded with the dialing process's pid and command line (found through
// /proc on Linux); after the tests, Run prints them and makes the binary
// exit non-zero. Tests that legitimately use the default ports run in a
// network namespace of their own (TestDocs), where this guard is not.
package portguard

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ports are the default ports no test may dial on loopback.
var Ports = []string{"127.0.0.1:1883", "127.0.0.1:7777"}

// Hit is one connection to a guarded port.
type Hit struct {
	Port    string
	Remote  string
	Process string // "pid N: command line", or "" when not found
}

// Guard holds the default ports it can.
type Guard struct {
	mu   sync.Mutex // guards hits, held, lns
	hits []Hit
	held map[string]bool
	lns  []net.Listener
	stop chan struct{}
	once sync.Once
	done sync.WaitGroup
}

// Start guards Ports until Stop.
func Start() *Guard {
	g := &Guard{held: map[string]bool{}, stop: make(chan struct{})}
	g.take()
	g.done.Add(1)
	go func() {
		defer g.done.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				g.take()
			}
		}
	}()
	return g
}

// take binds the ports not held yet.
func (g *Guard) take() {
	for _, addr := range Ports {
		g.mu.Lock()
		held := g.held[addr]
		g.mu.Unlock()
		if held {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: another guard, or a daemon of the user's
		}
		g.mu.Lock()
		select {
		case <-g.stop:
			g.mu.Unlock()
			ln.Close()
			return
		default:
		}
		g.held[addr] = true
		g.lns = append(g.lns, ln)
		g.mu.Unlock()
		g.done.Add(1)
		go g.serve(addr, ln)
	}
}

func (g *Guard) serve(addr string, ln net.Listener) {
	defer g.done.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		remote := c.RemoteAddr().String()
		h := Hit{Port: addr, Remote: remote, Process: dialer(remote)} // while the dialer holds its socket
		c.Close()
		g.mu.Lock()
		g.hits = append(g.hits, h)
		g.mu.Unlock()
		fmt.Fprintf(os.Stderr, "portguard: a test dialed %s, a default port (from %s, %s)\n", addr, remote, orUnknown(h.Process))
	}
}

// Stop releases the ports and returns what dialed them. It may be called
// more than once.
func (g *Guard) Stop() []Hit {
	g.once.Do(func() {
		g.mu.Lock()
		close(g.stop)
		for _, ln := range g.lns {
			ln.Close()
		}
		g.mu.Unlock()
	})
	g.done.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Hit(nil), g.hits...)
}

// Run runs the tests under a guard and returns the exit code: m.Run's, or
// 1 when a test dialed a default port. Use it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(portguard.Run(m)) }
func Run(m *testing.M) int {
	if os.Getenv("OPENSTARRY_PORTGUARD") == "off" {
		return m.Run()
	}
	g := Start()
	code := m.Run()
	if hits := g.Stop(); len(hits) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: portguard: a default port (%s) was dialed %d times during the tests; a test must use a free port (127.0.0.1:0, --broker-listen 127.0.0.1:0, --no-mqtt):\n", strings.Join(Ports, ", "), len(hits))
		for _, h := range hits {
			fmt.Fprintf(os.Stderr, "  %s from %s: %s\n", h.Port, h.Remote, orUnknown(h.Process))
		}
		return 1
	}
	return code
}

func orUnknown(s string) string {
	if s == "" {
		return "process not found"
	}
	return s
}

// dialer finds the process holding the socket whose local address is
// remote (the dialing end), through /proc/net/tcp and /proc/*/fd; "" when
// it cannot (not Linux, the process gone, another user's).
func dialer(remote string) string {
	host, port, err := net.SplitHostPort(remote)
	if err != nil {
		return ""
	}
	ip := net.ParseIP(host).To4()
	p, _ := strconv.Atoi(port)
	if ip == nil {
		return ""
	}
	// /proc/net/tcp prints the address as the host-order hex of the
	// network-order 32 bits: 127.0.0.1 is 0100007F on little-endian.
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	inode := ""
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local {
			inode = f[9]
			break
		}
	}
	if inode == "" || inode == "0" {
		return ""
	}
	procs, _ := os.ReadDir("/proc")
	want := "socket:[" + inode + "]"
	for _, pd := range procs {
		pid, err := strconv.Atoi(pd.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + pd.Name() + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + pd.Name() + "/fd/" + fd.Name()); err == nil && l == want {
				cmd, _ := os.ReadFile("/proc/" + pd.Name() + "/cmdline")
				return fmt.Sprintf("pid %d: %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")))
			}
		}
	}
	return ""
}
