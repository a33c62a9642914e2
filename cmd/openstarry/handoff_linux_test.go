package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// The connection hand-off (core/connpass, docs/daemon.md "Connection
// hand-off"): a client's kept-alive connection to the daemon is served by
// the agent process it asked, which hands back what is not its own. Each
// test checks who holds the server's end of the client's connection (the
// socket's inode in /proc/net/tcp, found among /proc/PID/fd): against a
// daemon without the hand-off, the agent never does, and they fail.

// rawConn is one kept-alive client connection, written by hand so that the
// test chooses every header (Host, Authorization).
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends one request and reads its answer; hdr are "Name: value" lines
// (a Host line replaces the default).
func (rc *rawConn) do(method, path, body string, hdr ...string) (int, string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, path)
	host := rc.c.RemoteAddr().String()
	for _, h := range hdr {
		if v, ok := strings.CutPrefix(h, "Host: "); ok {
			host = v
			continue
		}
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Host: %s\r\n", host)
	if body != "" || method == http.MethodPost {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	_ = rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return 0, "", err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(data), err
}

// must is do that fails the test on an error or an unexpected status.
func (rc *rawConn) must(want int, method, path, body string, hdr ...string) string {
	rc.t.Helper()
	code, data, err := rc.do(method, path, body, hdr...)
	if err != nil || code != want {
		rc.t.Fatalf("%s %s: %d %v %s, want %d", method, path, code, err, data, want)
	}
	return data
}

// holder waits until exactly one of pids holds the server's end of the
// connection and returns it (the daemon closes its descriptor of a handed
// connection just after sending it).
func (rc *rawConn) holder(pids map[string]int) string {
	rc.t.Helper()
	var last string
	err := wait.Poll(10*time.Second, func() error {
		inode, err := tcpInode(rc.c.RemoteAddr().(*net.TCPAddr), rc.c.LocalAddr().(*net.TCPAddr))
		if err != nil {
			return err
		}
		var who []string
		for name, pid := range pids {
			if holdsSocket(pid, inode) {
				who = append(who, name)
			}
		}
		last = strings.Join(who, ",")
		if len(who) != 1 {
			return fmt.Errorf("held by %q", who)
		}
		return nil
	})
	if err != nil {
		rc.t.Fatalf("who holds the connection: %v", err)
	}
	return last
}

// expectHolder fails the test unless who holds the connection.
func (rc *rawConn) expectHolder(pids map[string]int, who string) {
	rc.t.Helper()
	if got := rc.holder(pids); got != who {
		rc.t.Fatalf("the connection is held by %s, want %s", got, who)
	}
}

// tcpInode finds in /proc/net/tcp the inode of the socket local ↔ remote.
func tcpInode(local, remote *net.TCPAddr) (string, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	want := procAddr(local) + " " + procAddr(remote)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1]+" "+f[2] == want {
			return f[9], nil
		}
	}
	return "", errors.New("no socket " + want)
}

// procAddr writes a as /proc/net/tcp does: the IPv4 address as a
// little-endian word, then the port, in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	return strings.ToUpper(hex.EncodeToString([]byte{ip[3], ip[2], ip[1], ip[0]})) + ":" + fmt.Sprintf("%04X", a.Port)
}

func holdsSocket(pid int, inode string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}

// handoffConfig writes a test daemon's configuration listening on addr
// (port 0), with more lines of the http section.
func handoffConfig(t *testing.T, data, addr, httpLines string) string {
	t.Helper()
	body := fmt.Sprintf("data: %s\nhttp:\n  listen: %s:0\n%smqtt:\n  disabled: true\n"+
		"supervise:\n  backoff_initial: 50ms\n  stop_timeout: 5s\n  ready_timeout: 20s\n", data, addr, httpLines)
	path := filepath.Join(t.TempDir(), "openstarry.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// processes returns the daemon's pid and its running agents', by name.
func processes(t *testing.T, d *child, data string) map[string]int {
	t.Helper()
	pids := map[string]int{"daemon": d.cmd.Process.Pid}
	for _, a := range daemonStatus(t, data).Agents {
		if a.State == control.StateRunning {
			pids[a.ID] = a.PID
		}
	}
	return pids
}

// TestHandoffKeepAlive: one kept-alive connection alternating between two
// agents, the daemon's own routes and an unknown agent is served by whoever
// each request is for, the connection moving between the processes; the
// client's own Authorization does not reach the agent (its API would
// refuse it); a clean restart of the agent closes the idle connection it
// holds, and a new one reaches the restarted agent.
func TestHandoffKeepAlive(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, ""))
	base := d.url()
	cl, err := control.Discover(data)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w9"}); err != nil {
		t.Fatal(err)
	}
	pids := processes(t, d, data)
	if len(pids) != 3 {
		t.Fatalf("processes %v", pids)
	}
	rc := dialRaw(t, base)
	rc.must(200, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"k1","input":"one"}`)
	rc.expectHolder(pids, "master")
	if out := rc.must(200, "POST", "/agents/w9/tasks?wait=10s", `{"task_id":"k2","input":"two"}`,
		"Authorization: Bearer not-the-agents-token"); !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("w9's task: %s", out)
	}
	rc.expectHolder(pids, "w9")
	if out := rc.must(200, "GET", "/status", ""); !strings.Contains(out, `"agents"`) {
		t.Fatalf("status: %s", out)
	}
	rc.expectHolder(pids, "daemon")
	if out := rc.must(200, "GET", "/agents/master/tasks/k1", ""); !strings.Contains(out, `"output":"one"`) {
		t.Fatalf("k1: %s", out)
	}
	rc.expectHolder(pids, "master")
	if out := rc.must(404, "GET", "/agents/nobody/tasks/k1", ""); !strings.Contains(out, "unknown_agent") {
		t.Fatalf("unknown agent: %s", out)
	}
	rc.expectHolder(pids, "daemon")
	rc.must(200, "GET", "/agents/w9/tasks/k2", "")
	rc.expectHolder(pids, "w9")
	rc.must(200, "GET", "/healthz", "")
	rc.must(200, "GET", "/agents/master/tasks/k1", "")
	rc.expectHolder(pids, "master")

	// A clean restart: the idle connection the agent holds is closed.
	if out, code := runCLI(t, "agent", "restart", "master", "--data", data); code != 0 {
		t.Fatalf("restart: %d %s", code, out)
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := rc.br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection the restarted agent held is still open (%d bytes)", n)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection the restarted agent held: %v, want it closed", err)
	}
	pids = processes(t, d, data)
	rc2 := dialRaw(t, base)
	if out := rc2.must(200, "GET", "/agents/master/tasks/k1", ""); !strings.Contains(out, `"output":"one"`) {
		t.Fatalf("k1 after the restart: %s", out)
	}
	rc2.expectHolder(pids, "master")
}

// TestHandoffHosts: http.hosts holds on a connection the agent serves: a
// Host it allows is served by the agent, any other is answered 403
// bad_host by the daemon, as on a connection it serves itself.
func TestHandoffHosts(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, handoffConfig(t, data, "127.0.0.1", "  hosts: [api.example]\n"))
	pids := processes(t, d, data)
	rc := dialRaw(t, d.url())
	rc.must(200, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"h1","input":"x"}`, "Host: api.example")
	rc.expectHolder(pids, "master")
	rc.must(200, "GET", "/agents/master/tasks/h1", "", "Host: api.example:8080")
	rc.expectHolder(pids, "master")
	if out := rc.must(403, "GET", "/agents/master/tasks/h1", "", "Host: rebind.attacker.example"); !strings.Contains(out, "bad_host") {
		t.Fatalf("bad host: %s", out)
	}
}

// TestHandoffTokenOffLoopback: from off loopback (an address of a network
// namespace of the test's own), http.token holds on every request of a
// connection the agent serves: one without the token, or with a wrong one,
// goes back to the daemon, which answers 401 as it does on its own
// connections; the next one with the token is the agent's again.
func TestHandoffTokenOffLoopback(t *testing.T) {
	if !inNetns(t) {
		return
	}
	addr := offLoopback(t)
	data := dataDir(t)
	const tok = "lan-token-0123456789"
	d := startDaemon(t, handoffConfig(t, data, addr, "  token: "+tok+"\n"))
	base := d.url()
	if !strings.Contains(base, addr) {
		t.Fatalf("listening on %s, want %s", base, addr)
	}
	pids := processes(t, d, data)
	rc := dialRaw(t, base)
	if !strings.HasPrefix(rc.c.LocalAddr().String(), addr+":") {
		t.Fatalf("the client's address %s is not %s", rc.c.LocalAddr(), addr)
	}
	auth := "Authorization: Bearer " + tok
	rc.must(200, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"o1","input":"x"}`, auth)
	rc.expectHolder(pids, "master")
	if out := rc.must(401, "GET", "/agents/master/tasks/o1", ""); !strings.Contains(out, "unauthorized") {
		t.Fatalf("without the token: %s", out)
	}
	rc.expectHolder(pids, "daemon")
	rc.must(200, "GET", "/agents/master/tasks/o1", "", auth)
	rc.expectHolder(pids, "master")
	if out := rc.must(401, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"o2","input":"x"}`,
		"Authorization: Bearer wrong-token-0123456789"); !strings.Contains(out, "unauthorized") {
		t.Fatalf("with a wrong token: %s", out)
	}
	rc.expectHolder(pids, "daemon")
	// The refused task was not taken.
	rc.must(200, "GET", "/agents/master/tasks/o1", "", auth)
	rc.expectHolder(pids, "master")
	if code, out, err := rc.do("GET", "/agents/master/tasks/o2", "", auth); err != nil || code != 404 {
		t.Fatalf("the refused task: %d %v %s, want 404", code, err, out)
	}
	if !strings.Contains(d.logs(), `"message":"http: missing or wrong token"`) {
		t.Fatalf("the daemon did not log the refusals:\n%s", d.logs())
	}
}

// TestHandoffAgentKilled: an agent SIGKILLed while it holds a client's
// connection takes the connection with it; a task it answered through it
// (?wait=) is durable; a new connection is answered by the daemon (503
// while the agent restarts) and then by the restarted agent.
func TestHandoffAgentKilled(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, ""))
	base := d.url()
	pids := processes(t, d, data)
	rc := dialRaw(t, base)
	if out := rc.must(200, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"s1","input":"kept"}`); !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("s1: %s", out)
	}
	rc.expectHolder(pids, "master")
	if err := syscall.Kill(pids["master"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, out, err := rc.do("GET", "/agents/master/tasks/s1", ""); err == nil {
		t.Fatalf("the killed agent's connection answered %d %s", code, out)
	}
	seen := map[int]int{}
	err := wait.Poll(60*time.Second, func() error {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			return err
		}
		defer c.Close()
		rc2 := &rawConn{t: t, c: c, br: bufio.NewReader(c)}
		code, out, err := rc2.do("GET", "/agents/master/tasks/s1", "")
		if err != nil {
			return err
		}
		seen[code]++
		switch code {
		case 200:
			if !strings.Contains(out, `"status":"done"`) || !strings.Contains(out, `"output":"kept"`) {
				t.Fatalf("s1 after the kill: %s", out)
			}
			return nil
		case 502, 503:
			return fmt.Errorf("%d %s", code, out)
		}
		t.Fatalf("s1 after the kill: %d %s", code, out)
		return nil
	})
	if err != nil {
		t.Fatalf("the restarted agent: %v (answers %v)", err, seen)
	}
	t.Logf("answers while the agent restarted: %v", seen)
	st := daemonStatus(t, data)
	if a, _ := agentInfo(st, "master"); a.Restarts < 1 && a.PID == pids["master"] {
		t.Fatalf("master not restarted: %+v", a)
	}
}

// TestHandoffConnectionCap: the connections agents hold still count
// against the daemon's cap on open connections (httpx.DefaultMaxConns):
// with all of its places taken by connections the master holds, one more
// is answered 503 too_many_connections; once the master closes one (the
// client went away), a new connection is served.
func TestHandoffConnectionCap(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, daemonConfig(t, data, ""))
	base := d.url()
	pids := processes(t, d, data)
	const max = 256 // httpx.DefaultMaxConns
	conns := make([]*rawConn, max)
	for i := range conns {
		conns[i] = dialRaw(t, base)
		conns[i].must(404, "GET", "/agents/master/tasks/none", "")
	}
	conns[0].expectHolder(pids, "master")
	conns[max-1].expectHolder(pids, "master")
	over := dialRaw(t, base)
	if code, out, err := over.do("GET", "/agents/master/tasks/x", ""); err != nil || code != 503 || !strings.Contains(out, "too_many_connections") {
		t.Fatalf("one over the cap: %d %v %s, want 503 too_many_connections", code, err, out)
	}
	conns[0].c.Close()
	err := wait.Poll(30*time.Second, func() error {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			return err
		}
		defer c.Close()
		rc := &rawConn{t: t, c: c, br: bufio.NewReader(c)}
		code, out, err := rc.do("GET", "/agents/master/tasks/x", "")
		if err != nil {
			return err
		}
		if code == 503 {
			return errors.New(out)
		}
		if code != 404 {
			t.Fatalf("after a place was freed: %d %s", code, out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no place freed when the master closed a connection: %v", err)
	}
}

// TestHandoffOff: with http.handoff false the daemon keeps every
// connection and forwards its requests, as before the hand-off.
func TestHandoffOff(t *testing.T) {
	data := dataDir(t)
	d := startDaemon(t, handoffConfig(t, data, "127.0.0.1", "  handoff: false\n"))
	pids := processes(t, d, data)
	rc := dialRaw(t, d.url())
	rc.must(200, "POST", "/agents/master/tasks?wait=10s", `{"task_id":"f1","input":"x"}`)
	rc.must(200, "GET", "/agents/master/tasks/f1", "")
	rc.expectHolder(pids, "daemon")
	if strings.Contains(d.logs(), "hand-off") {
		t.Fatalf("the hand-off was tried:\n%s", d.logs())
	}
}
