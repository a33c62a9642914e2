package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/backoff"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// supervisor is the process table: the set of supervised agents, one
// member (and one supervisor goroutine, see supervise.go) per agent id,
// registered, looked up, stopped in reverse order of their start, and
// their state changes told to OnAgentState. It owns the table and the
// "stopping" flag: once set, no agent is added.
type supervisor struct {
	cfg        *config.Config // Supervise: timeouts, backoff, crash loop
	log        zerolog.Logger
	now        func() time.Time
	rand       func() float64 // backoff jitter
	launcher   Launcher
	launchSpec func(id, role string, spec agentSpec) LaunchSpec // specs.launchSpec
	onState    func(control.AgentInfo)                          // Options.OnAgentState; nil: none
	events     chan control.AgentInfo                           // to onState, in order (deliverEvents)
	pass       *connPass                                        // the connection hand-off (pass.go); nil: off

	mu       sync.Mutex // guards the fields below
	members  map[string]*member
	seq      uint64
	stopping bool
	recover  map[string]bool // agents the previous run left interrupted: marked recovered when added
}

// setRecover marks the agents whose members are shown as recovered.
func (s *supervisor) setRecover(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.recover[id] = true
	}
}

// isStopping reports whether the shutdown has begun.
func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// waitSettled waits until m is running (true), or in crashloop or stopped,
// or ctx ends (false).
func (s *supervisor) waitSettled(ctx context.Context, m *member) bool {
	for {
		st, _, ch := m.watch()
		switch st {
		case control.StateRunning:
			return true
		case control.StateCrashloop, control.StateStopped:
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// waitFirstOutcome waits until m's first process is running or has ended.
func (s *supervisor) waitFirstOutcome(ctx context.Context, m *member) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Supervise.ReadyTimeout)
	defer cancel()
	for {
		st, _, ch := m.watch()
		if st != control.StateStarting {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// waitRunning returns the address of agent id once it runs; errGone when
// it leaves the table first.
func (s *supervisor) waitRunning(ctx context.Context, id string) (string, error) {
	for {
		m := s.member(id)
		if m == nil {
			return "", fmt.Errorf("%w (%s)", errGone, id)
		}
		st, addr, ch := m.watch()
		if st == control.StateRunning {
			return addr, nil
		}
		select {
		case <-ch:
		case <-m.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// stopAll refuses new members from now on, then stops every agent, the
// last started first, and returns how many there were.
func (s *supervisor) stopAll() int {
	s.mu.Lock()
	s.stopping = true
	ms := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(b.seq) - int(a.seq) })
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Supervise.StopTimeout+5*time.Second)
		if err := m.send(ctx, cmdShutdown); err != nil {
			s.log.Warn().Str("agent", m.id).Err(err).Msg("stopping agent")
		}
		cancel()
	}
	return len(ms)
}

// add registers a supervised agent and starts its supervisor. The
// same id is never supervised twice.
func (s *supervisor) add(id, role string, spec agentSpec) (*member, error) {
	m, err := s.reserve(id, role, spec)
	if err != nil {
		return nil, err
	}
	go m.run()
	return m, nil
}

// reserve registers a supervised agent without starting it: the id is
// taken, atomically with the check that it is free. The caller starts it
// (go m.run()) or gives it back (release).
func (s *supervisor) reserve(id, role string, spec agentSpec) (*member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, ErrStopping
	}
	if old, ok := s.members[id]; ok {
		info := old.info()
		return nil, refuse(ErrConflict, "agent %s is already supervised by this daemon (state %s, pid %d)", id, info.State, info.PID)
	}
	s.seq++
	m := newMember(s, id, role, s.seq, spec)
	m.recovered = s.recover[id]
	s.members[id] = m
	return m, nil
}

// release gives back a reserved, never started member.
func (s *supervisor) release(m *member) {
	s.mu.Lock()
	if s.members[m.id] == m {
		delete(s.members, m.id)
	}
	s.mu.Unlock()
	close(m.done)
}

// remove ends an agent's supervision (its process stopped first).
func (s *supervisor) remove(ctx context.Context, m *member) error {
	if err := m.send(ctx, cmdShutdown); err != nil {
		return err
	}
	s.mu.Lock()
	if s.members[m.id] == m {
		delete(s.members, m.id)
	}
	s.mu.Unlock()
	return nil
}

func (s *supervisor) member(id string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[id]
}

// sorted returns the members in their order of creation.
func (s *supervisor) sorted() []*member {
	s.mu.Lock()
	ms := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(a.seq) - int(b.seq) })
	return ms
}

// notify queues a state change for OnAgentState.
func (s *supervisor) notify(info control.AgentInfo) {
	if s.onState == nil {
		return
	}
	select {
	case s.events <- info:
	default:
		s.log.Warn().Str("agent", info.ID).Str("state", info.State).Msg("agent state notification dropped (backlog full)")
	}
}

// deliverEvents calls OnAgentState in order until ctx (the daemon's life)
// ends.
func (s *supervisor) deliverEvents(ctx context.Context) {
	for {
		select {
		case info := <-s.events:
			if s.onState != nil {
				s.onState(info)
			}
		case <-ctx.Done():
			return
		}
	}
}

// backoff is the wait before restart n (n ≥ 1 crashes in the window):
// backoff_initial·2^(n−1), at most backoff_max, with core/backoff's jitter
// so that agents that failed together do not restart in step.
func (s *supervisor) backoff(n int) time.Duration {
	sv := s.cfg.Supervise
	return backoff.Policy{Initial: sv.BackoffInitial, Max: sv.BackoffMax, Rand: s.rand}.Delay(n - 1)
}
