package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// agentSpec is what an agent process is started from. It changes only by
// `openstarry agent restart` (a new resolution of the template).
type agentSpec struct {
	Template     string   // template name
	Type         string   // the template's type (its name when it has none)
	Version      string   // template version
	Source       string   // where the resolver found it
	Degraded     string   // why the design layer's copy was not used (Source cache), or ""
	Digest       string   // sha256 of the frozen bytes
	Blueprint    string   // the frozen file
	Requester    string   // workers: the agent that spawned it
	Workers      []string // the template's workers: what it may spawn; empty: nothing
	Tools        []string // the template's tools; spawning needs control.ToolAgentManager
	KeepEnv      []string // environment variables the template needs (the brain's key)
	Storage      string   // the template's own store URL, "" for the daemon's
	MaxTaskBytes int
	Ephemeral    bool // a worker whose snapshot is deleted once its last result is delivered
}

// Commands to a supervisor.
const (
	cmdStop     = iota + 1 // stop the process; stay stopped until cmdRestart
	cmdRestart             // (re)start now; the reply comes when it is ready
	cmdShutdown            // stop the process and end the supervisor
)

type command struct {
	kind  int
	reply chan error // buffered 1
}

// member is one supervised agent: a goroutine (run) that owns its process,
// starts it, restarts it with backoff, and obeys commands. Nothing else
// starts or stops the agent's process.
type member struct {
	s    *supervisor // the table it is in: the clock, the log, the launcher, the Supervise settings
	id   string
	role string
	seq  uint64 // order of creation; shutdown goes in reverse

	cmds chan command
	done chan struct{} // closed when run returns

	mu        sync.Mutex // guards the fields below
	spec      agentSpec
	state     string
	since     time.Time
	pid       int
	addr      string
	restarts  int
	crashes   []time.Time // crash times within the crash-loop window
	lastErr   string
	recovered bool
	readyDur  time.Duration
	changed   chan struct{} // closed and replaced at every change of state
	link      *passLink     // the hand-off's pair with the process (pass.go); nil: none
}

func (m *member) setLink(lk *passLink) {
	m.mu.Lock()
	m.link = lk
	m.mu.Unlock()
}

// passLink returns the pair with the agent's process when the agent takes
// connections now, else nil.
func (m *member) passLink() *passLink {
	m.mu.Lock()
	lk := m.link
	m.mu.Unlock()
	if lk == nil || !lk.ready.Load() {
		return nil
	}
	return lk
}

func newMember(s *supervisor, id, role string, seq uint64, spec agentSpec) *member {
	return &member{s: s, id: id, role: role, seq: seq, spec: spec, cmds: make(chan command),
		done: make(chan struct{}), state: control.StateStarting, since: s.now(), changed: make(chan struct{})}
}

// watch returns the current state, the agent's address and a channel
// closed at the next change.
func (m *member) watch() (state, addr string, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.addr, m.changed
}

// ready is how long its last process took to hydrate and listen; 0 before
// the first did.
func (m *member) ready() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readyDur
}

func (m *member) getSpec() agentSpec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spec
}

func (m *member) setSpec(s agentSpec) {
	m.mu.Lock()
	m.spec = s
	m.mu.Unlock()
}

// setState records a new state; fn, when not nil, changes other fields
// under the same lock.
func (m *member) setState(state string, fn func()) {
	m.mu.Lock()
	m.state = state
	m.since = m.s.now()
	if fn != nil {
		fn()
	}
	close(m.changed)
	m.changed = make(chan struct{})
	info := m.infoLocked()
	m.mu.Unlock()
	m.s.notify(info)
}

func (m *member) info() control.AgentInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.infoLocked()
}

func (m *member) infoLocked() control.AgentInfo {
	return control.AgentInfo{
		ID: m.id, Role: m.role, Template: m.spec.Template, TemplateVersion: m.spec.Version, Source: m.spec.Source,
		Degraded: m.spec.Degraded != "", DegradedReason: m.spec.Degraded, Requester: m.spec.Requester,
		State: m.state, PID: m.pid, Addr: m.addr, Restarts: m.restarts, LastError: m.lastErr,
		Since: m.since, Recovered: m.recovered,
	}
}

// send delivers a command and waits for its reply.
func (m *member) send(ctx context.Context, kind int) error {
	c := command{kind: kind, reply: make(chan error, 1)}
	select {
	case m.cmds <- c:
	case <-m.done:
		return fmt.Errorf("agent %s is no longer supervised", m.id)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Outcomes of one process's life.
const (
	outCrashed  = iota + 1 // it ended on its own, or never got ready
	outStopped             // stopped by cmdStop
	outRestart             // stopped by cmdRestart
	outShutdown            // stopped by cmdShutdown
)

// run is the supervisor: it owns the agent's process from spawn to exit,
// for every restart, until cmdShutdown.
func (m *member) run() {
	defer close(m.done)
	var pending *command // a restart whose reply waits for readiness
	for {
		kind, c := m.runOnce(&pending)
		switch kind {
		case outShutdown:
			m.setState(control.StateStopped, func() { m.pid, m.addr = 0, "" })
			c.reply <- nil
			return
		case outStopped:
			m.setState(control.StateStopped, func() { m.pid, m.addr = 0, "" })
			m.s.log.Info().Str("agent", m.id).Msg("agent stopped")
			c.reply <- nil
			if !m.idle(0, &pending) {
				return
			}
		case outRestart:
			// pending holds c; it is answered once the new process is ready.
		case outCrashed:
			if pending != nil {
				pending.reply <- fmt.Errorf("agent %s exited before it was ready: %s", m.id, m.info().LastError)
				pending = nil
			}
			n := m.recordCrash()
			sv := m.s.cfg.Supervise
			if n > sv.CrashloopRestarts {
				m.setState(control.StateCrashloop, func() { m.pid, m.addr = 0, "" }) // no process: no pid to show
				m.s.log.Error().Str("agent", m.id).Int("crashes", n).Dur("window", sv.CrashloopWindow).Str("last_error", m.info().LastError).
					Msgf("agent %s is in crashloop: %d crashes within %s; not restarting it until `openstarry agent restart %s`", m.id, n, sv.CrashloopWindow, m.id)
				if !m.idle(0, &pending) {
					return
				}
				continue
			}
			delay := m.s.backoff(n)
			m.setState(control.StateBackoff, func() { m.pid, m.addr = 0, "" })
			m.s.log.Warn().Str("agent", m.id).Int("crashes", n).Int64("backoff_ms", delay.Milliseconds()).Str("last_error", m.info().LastError).
				Msgf("agent %s exited; restarting it in %s", m.id, delay.Round(time.Millisecond))
			if !m.idle(delay, &pending) {
				return
			}
		}
	}
}

// idle waits with no process running until the agent must start again
// (true) or the supervisor must end (false). With delay > 0 the wait ends
// by itself after delay (a backoff); with 0 only cmdRestart ends it.
func (m *member) idle(delay time.Duration, pending **command) bool {
	var timeout <-chan time.Time
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-timeout:
			m.mu.Lock()
			m.restarts++
			m.mu.Unlock()
			return true
		case c := <-m.cmds:
			switch c.kind {
			case cmdShutdown:
				if m.info().State != control.StateCrashloop {
					m.setState(control.StateStopped, nil)
				}
				c.reply <- nil
				return false
			case cmdStop:
				timeout = nil
				m.setState(control.StateStopped, func() { m.pid, m.addr = 0, "" })
				c.reply <- nil
			case cmdRestart:
				m.mu.Lock()
				m.restarts++
				m.crashes = nil
				m.mu.Unlock()
				if *pending != nil {
					(*pending).reply <- errors.New("superseded by another restart")
				}
				*pending = &c
				return true
			}
		}
	}
}

// runOnce starts the process and follows it until it ends.
func (m *member) runOnce(pending **command) (int, command) {
	spec := m.getSpec()
	ls := m.s.launchSpec(m.id, m.role, spec)
	m.setState(control.StateStarting, func() { m.pid, m.addr = 0, "" })
	start := m.s.now()
	lk := m.s.pass.attach(&ls)
	p, err := m.s.launcher.Launch(ls)
	for _, f := range ls.Files {
		_ = f.Close() // the child's now
	}
	if err == nil {
		lk.start()
		m.setLink(lk)
		defer func() {
			m.setLink(nil)
			lk.close() // the process has ended
		}()
	} else if lk != nil {
		_ = lk.l.Close()
	}
	if err != nil {
		m.mu.Lock()
		m.lastErr = err.Error()
		m.mu.Unlock()
		m.s.log.Error().Str("agent", m.id).Err(err).Msg("spawn failed")
		return outCrashed, command{}
	}
	m.mu.Lock()
	m.pid = p.PID()
	m.mu.Unlock()
	m.s.log.Info().Str("agent", m.id).Int("pid", p.PID()).Str("template", spec.Template).Msg("agent spawned")
	readyT := time.NewTimer(m.s.cfg.Supervise.ReadyTimeout)
	defer readyT.Stop()
	for {
		select {
		case addr := <-p.Ready():
			readyT.Stop()
			took := m.s.now().Sub(start)
			m.setState(control.StateRunning, func() { m.addr = addr; m.readyDur = took })
			m.s.log.Info().Str("agent", m.id).Int("pid", p.PID()).Str("addr", addr).Int64("ready_ms", took.Milliseconds()).
				Msgf("agent %s online", m.id)
			if *pending != nil {
				(*pending).reply <- nil
				*pending = nil
			}
		case <-p.Done():
			m.recordExit(p)
			return outCrashed, command{}
		case <-readyT.C:
			m.mu.Lock()
			m.lastErr = fmt.Sprintf("not hydrated and listening within %s (supervise.ready_timeout)", m.s.cfg.Supervise.ReadyTimeout)
			m.mu.Unlock()
			m.stopProcess(p)
			return outCrashed, command{}
		case c := <-m.cmds:
			m.setState(control.StateStopping, nil)
			m.stopProcess(p)
			switch c.kind {
			case cmdRestart:
				m.mu.Lock()
				m.restarts++
				m.crashes = nil
				m.mu.Unlock()
				if *pending != nil {
					(*pending).reply <- errors.New("superseded by another restart")
				}
				*pending = &c
				return outRestart, c
			case cmdStop:
				return outStopped, c
			default:
				return outShutdown, c
			}
		}
	}
}

// stopProcess asks the process to stop, waits supervise.stop_timeout, then
// kills it.
func (m *member) stopProcess(p Process) {
	_ = p.Terminate()
	t := time.NewTimer(m.s.cfg.Supervise.StopTimeout)
	defer t.Stop()
	select {
	case <-p.Done():
		return
	case <-t.C:
	}
	m.s.log.Warn().Str("agent", m.id).Int("pid", p.PID()).Dur("timeout", m.s.cfg.Supervise.StopTimeout).Msg("agent did not stop in time; killing it")
	_ = p.Kill()
	<-p.Done()
}

// recordExit keeps why the process ended.
func (m *member) recordExit(p Process) {
	why := "exit status 0"
	if err := p.ExitError(); err != nil {
		why = err.Error()
	}
	msg := why
	if code := p.ExitCode(); code == 3 {
		msg = why + " (its store is locked: another process runs this agent)"
	}
	if last := p.LastError(); last != "" && !strings.Contains(msg, last) {
		msg += ": " + last
	}
	m.mu.Lock()
	m.lastErr = msg
	m.mu.Unlock()
}

// recordCrash adds a crash now and returns the crashes within the window.
func (m *member) recordCrash() int {
	now := m.s.now()
	win := m.s.cfg.Supervise.CrashloopWindow
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashes = slices.DeleteFunc(append(m.crashes, now), func(t time.Time) bool { return now.Sub(t) > win })
	return len(m.crashes)
}
