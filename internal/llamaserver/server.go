// Package llamaserver puts a real model server into the tests: llama.cpp's
// own llama-server (built by build/build.sh into a cache directory, which
// .ci/run does before the tests) serving a tiny model the tests generate
// (Model, written as GGUF by this package). Tests that need it call Require,
// which skips with the reason when the binary is missing under a plain
// go test, and fails when CI is set: in CI the server is always there.
package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// Version is the node-llama-cpp release build.sh builds from.
const Version = "3.21.1"

// EnvPath names the environment variable that points at the binary.
const EnvPath = "OPENSTARRY_LLAMA_SERVER"

// Path returns the llama-server binary: $OPENSTARRY_LLAMA_SERVER, or where
// build.sh puts it by default ($HOME/.cache/openstarry/llama-server-VERSION).
func Path() (string, error) {
	p := os.Getenv(EnvPath)
	if p == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(home, ".cache", "openstarry", "llama-server-"+Version, "llama-server")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("llama-server not found at %s (internal/llamaserver/build/build.sh builds it; %s=path chooses another): %w", p, EnvPath, err)
	}
	return p, nil
}

// Require returns the binary's path. Without it, the test is skipped with
// the reason, or fails when the environment variable CI is set.
func Require(t testing.TB) string {
	t.Helper()
	p, err := Path()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and %v", err)
		}
		t.Skipf("%v", err)
	}
	return p
}

// Options are how a test starts the server.
type Options struct {
	Model Model // the model written to the test's temporary directory
	// Context is -c (default 4096), Parallel -np (default 1), Predict -n,
	// the most tokens one answer may have (default 2048).
	Context, Parallel, Predict int
	Args                       []string // more flags
	// Command, when set, replaces every flag above: the server runs with
	// these arguments, where "MODEL" stands for the model file and "PORT"
	// for the port (a documented command line, run as written).
	Command []string
}

// Server is a running llama-server on a loopback port of its own.
type Server struct {
	URL  string // http://127.0.0.1:PORT/v1, the brain's base_url
	Root string // http://127.0.0.1:PORT
	Port int

	t    testing.TB
	bin  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer // both streams of every run
}

// Start writes the model and starts the server on a free port, and waits
// until /health answers. The server is killed when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Require(t)
	if o.Context == 0 {
		o.Context = 4096
	}
	// llama-server caps a slot's context at the model's trained one.
	o.Model.ContextLength = max(o.Model.ContextLength, o.Context)
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.Predict == 0 {
		o.Predict = 2048
	}
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := o.Model.Write(model); err != nil {
		t.Fatal(err)
	}
	port := loopback.FreePort(t)
	s := &Server{t: t, bin: bin, Port: port,
		Root: "http://127.0.0.1:" + strconv.Itoa(port)}
	s.URL = s.Root + "/v1"
	s.args = append([]string{"-m", model, "--jinja", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-t", "1", "-c", strconv.Itoa(o.Context), "-np", strconv.Itoa(o.Parallel), "-n", strconv.Itoa(o.Predict),
		"--temp", "0", "--no-warmup"}, o.Args...)
	if o.Command != nil {
		s.args = nil
		for _, a := range o.Command {
			switch a {
			case "MODEL":
				a = model
			case "PORT":
				a = strconv.Itoa(port)
			}
			s.args = append(s.args, a)
		}
	}
	t.Cleanup(s.Kill)
	s.Restart()
	return s
}

// Restart starts the server again on the same port (after Kill) and waits
// until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = &lockedWriter{s}, &lockedWriter{s}
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("starting llama-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	err := wait.Poll(60*time.Second, func() error {
		select {
		case <-done:
			return errors.New("llama-server exited")
		default:
		}
		resp, err := http.Get(s.Root + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health answered %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		s.t.Fatalf("llama-server %v did not become ready: %v\n%s", s.args, err, s.Log())
	}
}

// Kill SIGKILLs the server and waits until it is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Log returns what the server printed, over every run.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

type lockedWriter struct{ s *Server }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.log.Write(p)
}

// Generating reports whether a slot of the server is working on a request
// (GET /slots).
func (s *Server) Generating(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Root+"/slots", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		return false, fmt.Errorf("/slots: %w", err)
	}
	for _, sl := range slots {
		if sl.IsProcessing {
			return true, nil
		}
	}
	return false, nil
}
