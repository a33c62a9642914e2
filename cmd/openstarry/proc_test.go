package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/portguard"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// binPath is the openstarry binary built once for the tests that run it as
// a child process.
var binPath string

func TestMain(m *testing.M) {
	// A test that runs this test binary again (in a network namespace)
	// hands it the binary it built.
	if p := os.Getenv("OPENSTARRY_TEST_BIN"); p != "" {
		binPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "openstarry-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "openstarry")
	// Built as build.sh builds the release binary, so that what the
	// benchmarks measure (boot time, resident memory) is what ships.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binPath, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building openstarry: %v\n%s", err, out)
		os.Exit(1)
	}
	// No test may dial 127.0.0.1:1883 or :7777, where a user's `make run`
	// listens (issue #30): the guard holds them while the tests run and
	// fails the binary, naming the process, if anything connects.
	code := portguard.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// checkDefaultPorts fails the test when args start `openstarry run` without
// saying where its MQTT and HTTP go: by default it dials (or serves)
// 127.0.0.1:1883 and listens on 127.0.0.1:7777, where a user's `make run`
// is (issue #30: the corruption tests' agents joined it as its device).
// The portguard catches such a dial only when it holds the port; this
// catches the command itself.
func checkDefaultPorts(t testing.TB, env []string, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "run" {
		return
	}
	has := func(flags ...string) bool {
		for _, a := range args[1:] {
			for _, f := range flags {
				if a == f || strings.HasPrefix(a, f+"=") {
					return true
				}
			}
		}
		for _, e := range env {
			for _, f := range flags {
				if name := "OPENSTARRY_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(f, "--"), "-", "_")); strings.HasPrefix(e, name+"=") {
					return true
				}
			}
		}
		return false
	}
	for i, a := range args {
		for _, f := range []string{"--listen", "--broker-listen", "--broker"} {
			v, ok := strings.CutPrefix(a, f+"=")
			if a == f && i+1 < len(args) {
				v, ok = args[i+1], true
			}
			if ok && (strings.HasSuffix(v, "127.0.0.1:1883") || strings.HasSuffix(v, "127.0.0.1:7777") || strings.HasSuffix(v, "localhost:1883") || strings.HasSuffix(v, "localhost:7777")) {
				t.Fatalf("openstarry %s: %s %s is a default port (a user's daemon or broker)", strings.Join(args, " "), f, v)
			}
		}
	}
	if !has("--no-mqtt", "--broker", "--broker-listen") {
		t.Fatalf("openstarry %s: no --no-mqtt, --broker or --broker-listen: the agent would use 127.0.0.1:1883, a user's broker", strings.Join(args, " "))
	}
	if !has("--listen") {
		t.Fatalf("openstarry %s: no --listen: the agent would listen on 127.0.0.1:7777", strings.Join(args, " "))
	}
}

// child is one running openstarry process whose log is captured.
type child struct {
	t    testing.TB
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	addr chan string
	done chan struct{}
	err  error
}

var listenRe = regexp.MustCompile(`listening on (http://[0-9.:\[\]]+)`)

// startChild runs openstarry with args and waits until its HTTP listener is
// up (when waitListen) or it exits.
func startChild(t testing.TB, waitListen bool, args ...string) *child {
	t.Helper()
	return startChildCmd(t, exec.Command(binPath, args...))
}

// startChildCmd is startChild for a command of the caller's (a shell that
// sets the umask first, for example).
func startChildCmd(t testing.TB, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{t: t, addr: make(chan string, 1), done: make(chan struct{})}
	c.cmd = cmd
	if len(cmd.Args) > 0 && cmd.Path == binPath {
		checkDefaultPorts(t, append(os.Environ(), cmd.Env...), cmd.Args[1:])
	}
	c.cmd.Env = append(os.Environ(), "OPENSTARRY_LOG_FORMAT=json")
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout = io.Discard
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.log.WriteString(line + "\n")
			c.mu.Unlock()
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case c.addr <- m[1]:
				default:
				}
			}
		}
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *child) url() string {
	c.t.Helper()
	select {
	case a := <-c.addr:
		c.addr <- a
		return a
	case <-c.done:
		c.t.Fatalf("openstarry exited before listening: %v\n%s", c.err, c.logs())
	case <-time.After(20 * time.Second):
		c.t.Fatalf("openstarry did not start listening\n%s", c.logs())
	}
	return ""
}

// waitLog waits until the process's log contains s, and fails the test
// at once if the process exits first.
func (c *child) waitLog(s string, timeout time.Duration) {
	c.t.Helper()
	err := wait.Poll(timeout, func() error {
		if strings.Contains(c.logs(), s) {
			return nil
		}
		select {
		case <-c.done:
			if strings.Contains(c.logs(), s) {
				return nil
			}
			c.t.Fatalf("exited (%v) before logging %q:\n%s", c.err, s, c.logs())
		default:
		}
		return errors.New("not logged")
	})
	if err != nil {
		c.t.Fatalf("no %q within %s:\n%s", s, timeout, c.logs())
	}
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

func (c *child) kill() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
}

func (c *child) wait(timeout time.Duration) (int, error) {
	select {
	case <-c.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("still running after %s", timeout)
	}
	if ee, ok := c.err.(*exec.ExitError); ok {
		return ee.ExitCode(), nil
	}
	if c.err != nil {
		return -1, c.err
	}
	return 0, nil
}

var httpc = &http.Client{Timeout: 10 * time.Second}

func postTask(ctx context.Context, base, agentID string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/agents/"+agentID+"/tasks", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

type taskState struct {
	TaskID    string          `json:"task_id"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output"`
	Error     string          `json:"error"`
	TickIndex uint64          `json:"tick_index"`
}

func getTask(base, agentID, taskID string) (int, taskState, error) {
	resp, err := httpc.Get(base + "/agents/" + agentID + "/tasks/" + taskID)
	if err != nil {
		return 0, taskState{}, err
	}
	defer resp.Body.Close()
	var st taskState
	err = json.NewDecoder(resp.Body).Decode(&st)
	return resp.StatusCode, st, err
}

// waitTask waits until the task is finished (neither queued nor running)
// and returns its state.
func waitTask(t *testing.T, base, agentID, taskID string) taskState {
	t.Helper()
	var st taskState
	wait.Until(t, 30*time.Second, "task "+taskID+" to finish", func() error {
		code, s, err := getTask(base, agentID, taskID)
		switch {
		case err != nil:
			return err
		case code != 200:
			return fmt.Errorf("status %d", code)
		case s.Status == "queued" || s.Status == "running":
			return errors.New(s.Status)
		}
		st = s
		return nil
	})
	return st
}

func appendTask(id, file string) []byte {
	b, _ := json.Marshal(map[string]any{
		"task_id": id,
		"type":    "test",
		"input": map[string]any{"call": []map[string]any{
			{"tool": "file_append", "args": map[string]string{"file": file, "line": "line " + id}},
		}},
	})
	return b
}

func countLines(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if l != "" {
			counts[l]++
		}
	}
	return counts
}

// runCLI runs the built binary and returns its combined output and exit code.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with more environment variables.
func runCLIEnv(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	checkDefaultPorts(t, append(os.Environ(), env...), args)
	cmd := exec.Command(binPath, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// fatalRecorder records a Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	if r.msg == "" {
		r.msg = fmt.Sprintf(format, args...)
	}
}

// TestCheckDefaultPorts: an `openstarry run` of a test must say where its
// MQTT and HTTP go, away from the default ports.
func TestCheckDefaultPorts(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string // "" accepted
	}{
		{nil, []string{"run", "--agent", "c1", "--listen", "127.0.0.1:0"}, "no --no-mqtt"},
		{nil, []string{"run", "--agent", "c1", "--no-mqtt"}, "no --listen"},
		{nil, []string{"run", "--agent", "c1", "--listen", "127.0.0.1:0", "--no-mqtt"}, ""},
		{nil, []string{"run", "--agent", "c1", "--listen=", "--broker-listen", "127.0.0.1:0"}, ""},
		{nil, []string{"run", "--agent", "c1", "--listen", "", "--broker", "tcp://127.0.0.1:40000"}, ""},
		{[]string{"OPENSTARRY_NO_MQTT=1", "OPENSTARRY_LISTEN=127.0.0.1:0"}, []string{"run", "--agent", "c1"}, ""},
		{[]string{"OPENSTARRY_BROKER_LISTEN=127.0.0.1:0"}, []string{"run", "--agent", "c1", "--listen", ""}, ""},
		{nil, []string{"run", "--agent", "c1", "--listen", "", "--broker-listen", "127.0.0.1:1883"}, "default port"},
		{nil, []string{"run", "--agent", "c1", "--listen=127.0.0.1:7777", "--no-mqtt"}, "default port"},
		{nil, []string{"run", "--agent", "c1", "--listen", "", "--broker", "tcp://localhost:1883"}, "default port"},
		{nil, []string{"snapshot", "show", "--agent", "c1"}, ""},
	} {
		r := &fatalRecorder{TB: t}
		checkDefaultPorts(r, tc.env, tc.args)
		if tc.want == "" && r.msg != "" || tc.want != "" && !strings.Contains(r.msg, tc.want) {
			t.Errorf("%v %q: %q, want %q", tc.env, tc.args, r.msg, tc.want)
		}
	}
}
