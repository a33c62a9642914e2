package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// The set of supervised agents: one member (and one supervisor, see
// supervise.go) per agent id, registered, looked up, stopped in reverse
// order of their start, and their state changes told to OnAgentState.

// waitSettled waits until m is running (true), or in crashloop or stopped,
// or ctx ends (false).
func (d *Daemon) waitSettled(ctx context.Context, m *member) bool {
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

// shutdown stops the session dispatchers (a task cut short by a clean
// stop is not a crash), then every agent, the last started first, then ends the
// handoffs (they resume at the next boot).
func (d *Daemon) shutdown() {
	d.pauseSessions()
	d.mu.Lock()
	d.stopping = true
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(b.seq) - int(a.seq) })
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Supervise.StopTimeout+5*time.Second)
		if err := m.send(ctx, cmdShutdown); err != nil {
			d.log.Warn().Str("agent", m.id).Err(err).Msg("stopping agent")
		}
		cancel()
	}
	d.cancelLife()
	d.handoffs.Wait()
	d.log.Info().Int("agents", len(ms)).Msg("all agents stopped")
}

// addMember registers a supervised agent and starts its supervisor. The
// same id is never supervised twice.
func (d *Daemon) addMember(id, role string, spec agentSpec) (*member, error) {
	m, err := d.reserve(id, role, spec)
	if err != nil {
		return nil, err
	}
	go m.run()
	return m, nil
}

// reserve registers a supervised agent without starting it: the id is
// taken, atomically with the check that it is free. The caller starts it
// (go m.run()) or gives it back (release).
func (d *Daemon) reserve(id, role string, spec agentSpec) (*member, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return nil, ErrStopping
	}
	if old, ok := d.members[id]; ok {
		info := old.info()
		return nil, refuse(ErrConflict, "agent %s is already supervised by this daemon (state %s, pid %d)", id, info.State, info.PID)
	}
	d.seq++
	m := newMember(d, id, role, d.seq, spec)
	m.recovered = d.recover[id]
	d.members[id] = m
	return m, nil
}

// release gives back a reserved, never started member.
func (d *Daemon) release(m *member) {
	d.mu.Lock()
	if d.members[m.id] == m {
		delete(d.members, m.id)
	}
	d.mu.Unlock()
	close(m.done)
}

// removeMember ends an agent's supervision (its process stopped first).
func (d *Daemon) removeMember(ctx context.Context, m *member) error {
	if err := m.send(ctx, cmdShutdown); err != nil {
		return err
	}
	d.mu.Lock()
	if d.members[m.id] == m {
		delete(d.members, m.id)
	}
	d.mu.Unlock()
	return nil
}

func (d *Daemon) member(id string) *member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.members[id]
}

// sortedMembers returns the members in their order of creation.
func (d *Daemon) sortedMembers() []*member {
	d.mu.Lock()
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return int(a.seq) - int(b.seq) })
	return ms
}

// notify queues a state change for OnAgentState.
func (d *Daemon) notify(info control.AgentInfo) {
	if d.o.OnAgentState == nil {
		return
	}
	select {
	case d.events <- info:
	default:
		d.log.Warn().Str("agent", info.ID).Str("state", info.State).Msg("agent state notification dropped (backlog full)")
	}
}

// deliverEvents calls OnAgentState in order until the daemon stops.
func (d *Daemon) deliverEvents() {
	for {
		select {
		case info := <-d.events:
			if d.o.OnAgentState != nil {
				d.o.OnAgentState(info)
			}
		case <-d.life.Done():
			return
		}
	}
}
