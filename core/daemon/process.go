package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// LaunchSpec is one agent process to start.
type LaunchSpec struct {
	AgentID string
	Args    []string // after the executable
	Env     []string // the whole environment
	// Files are descriptors the child inherits from 3 on
	// (exec.Cmd.ExtraFiles): the agent's end of the connection hand-off's
	// pair (pass.go). The launcher may ignore them; the caller closes
	// them once Launch returned.
	Files []*os.File
}

// Process is a started agent process.
type Process interface {
	PID() int
	// Ready yields the agent's HTTP address once it has hydrated and
	// listens; it is never closed.
	Ready() <-chan string
	// Done is closed when the process has exited and its output is read.
	Done() <-chan struct{}
	// ExitError describes how it ended (after Done): nil for exit 0.
	ExitError() error
	// ExitCode is the exit code after Done, -1 when killed by a signal.
	ExitCode() int
	// LastError is the last error the process logged, "" when none.
	LastError() string
	// Terminate asks the process to stop: SIGTERM, or on Windows the end
	// of its stdin pipe.
	Terminate() error
	// Kill ends it at once.
	Kill() error
}

// Launcher starts agent processes. Tests use fakes.
type Launcher interface {
	Launch(spec LaunchSpec) (Process, error)
}

// ExecLauncher starts `Path` as a child process.
type ExecLauncher struct {
	Path string
	// Sink receives the children's log lines (JSON, one per line), with an
	// "agent" field added when missing; nil discards them. Writes are
	// serialised by the launcher.
	Sink io.Writer
	// MinLevel drops forwarded lines below it (children always log at
	// info at least, because their readiness is an info line).
	MinLevel zerolog.Level
	mu       sync.Mutex // serialises writes to Sink
}

// Launch starts the process. Its stdin is a pipe the daemon keeps open for
// the child's life: the child stops when it reads EOF, which happens when
// the daemon closes it or dies.
func (l *ExecLauncher) Launch(spec LaunchSpec) (Process, error) {
	cmd := exec.Command(l.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.SysProcAttr = sysProcAttr()
	cmd.ExtraFiles = spec.Files
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", spec.AgentID, err)
	}
	p := &execProcess{l: l, id: spec.AgentID, cmd: cmd, stdin: stdin,
		ready: make(chan string, 1), done: make(chan struct{})}
	go p.read(stderr)
	return p, nil
}

type execProcess struct {
	l     *ExecLauncher
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan string
	done  chan struct{}

	mu      sync.Mutex // guards lastErr, exitErr, code, readied
	lastErr string
	exitErr error
	code    int
	readied bool
	stdinMu sync.Mutex // guards closing stdin
	closed  bool
}

func (p *execProcess) PID() int              { return p.cmd.Process.Pid }
func (p *execProcess) Ready() <-chan string  { return p.ready }
func (p *execProcess) Done() <-chan struct{} { return p.done }

func (p *execProcess) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *execProcess) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

func (p *execProcess) LastError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

func (p *execProcess) Terminate() error { return terminate(p) }

func (p *execProcess) Kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// closeStdin ends the pipe the child watches.
func (p *execProcess) closeStdin() error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.stdin.Close()
}

// maxLine bounds one forwarded log line; the rest is dropped, the reading
// goes on (a child blocked on a full stderr pipe would hang).
const maxLine = 64 << 10

func (p *execProcess) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 16<<10)
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(chunk) > 0 && len(line) < maxLine {
			line = append(line, chunk[:min(len(chunk), maxLine-len(line))]...)
		}
		if err != nil {
			if len(line) > 0 {
				p.handle(line)
			}
			break
		}
		if !isPrefix {
			p.handle(line)
			line = line[:0]
		}
	}
	err := p.cmd.Wait()
	code := 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
	}
	_ = p.closeStdin()
	p.mu.Lock()
	p.exitErr, p.code = err, code
	p.mu.Unlock()
	close(p.done)
}

// logLine is what the daemon reads of a child's JSON log line.
type logLine struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Addr    string `json:"addr"`
	Error   string `json:"error"`
	Agent   string `json:"agent"`
}

// readyPrefix starts the line `openstarry run`/`core` logs once the agent
// has hydrated and its HTTP API listens; its "addr" field is the address.
const readyPrefix = "listening on http://"

func (p *execProcess) handle(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if bytes.HasPrefix(line, schedPrefix) {
		// The Go runtime's scheduler summary, which GODEBUG's schedtrace
		// prints: with the daemon's setting (cmd/openstarry/procs.go) only
		// on a machine up for more than 24.8 days. Not the agent's last
		// words.
		if zerolog.DebugLevel >= p.l.MinLevel {
			p.forward(runtimeLine(p.id, string(line)))
		}
		return
	}
	var ll logLine
	isJSON := line[0] == '{' && json.Unmarshal(line, &ll) == nil
	if !isJSON {
		// The last words of a failed command: "openstarry: ERROR".
		msg := strings.TrimPrefix(string(line), "openstarry: ")
		p.mu.Lock()
		p.lastErr = msg
		p.mu.Unlock()
		p.forward(nonJSON(p.id, msg))
		return
	}
	switch ll.Level {
	case "error", "fatal", "panic":
		msg := ll.Message
		if ll.Error != "" {
			msg += ": " + ll.Error
		}
		p.mu.Lock()
		p.lastErr = msg
		p.mu.Unlock()
	}
	if strings.HasPrefix(ll.Message, readyPrefix) && ll.Addr != "" {
		p.mu.Lock()
		first := !p.readied
		p.readied = true
		p.mu.Unlock()
		if first {
			p.ready <- ll.Addr
		}
	}
	if lvl, err := zerolog.ParseLevel(ll.Level); err == nil && lvl < p.l.MinLevel && ll.Level != "" {
		return
	}
	if ll.Agent == "" && line[len(line)-1] == '}' {
		line = append([]byte(`{"agent":`+quote(p.id)+`,`), line[1:]...)
	}
	p.forward(line)
}

func (p *execProcess) forward(line []byte) {
	if p.l.Sink == nil {
		return
	}
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	_, _ = p.l.Sink.Write(buf)
}

// schedPrefix starts the line GODEBUG's schedtrace makes the Go runtime
// print: "SCHED 0ms: gomaxprocs=1 idleprocs=0 threads=5 ...".
var schedPrefix = []byte("SCHED ")

// runtimeLine is a runtime's scheduler summary as a debug log line.
func runtimeLine(agentID, msg string) []byte {
	b, _ := json.Marshal(map[string]string{"level": "debug", "agent": agentID, "component": "runtime", "message": msg})
	return b
}

func nonJSON(agentID, msg string) []byte {
	b, _ := json.Marshal(map[string]string{"level": "error", "agent": agentID, "message": msg})
	return b
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
