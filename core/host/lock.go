package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// ErrAgentRunning is returned by LockAgent when another process holds the
// agent's lock.
var ErrAgentRunning = errors.New("agent is already running")

// AgentLock is the one-process-per-agent guard for every store: an
// exclusive lock on DATA/agents/{id}/agent.lock, taken by Run before
// anything else starts, held for the life of the process and released by
// the kernel when the process dies, however it dies. This comment is the
// one description of the guard; a store's own lock (bbolt's flock on
// state.db, answered with plugin.ErrLocked) is a second line behind it, for
// that store only, which also stops a process that opens the store without
// Run (`openstarry snapshot`).
type AgentLock struct{ f *os.File }

// LockAgent takes the agent's lock without waiting.
func LockAgent(dataDir, agentID string) (*AgentLock, error) {
	dir := filepath.Join(dataDir, "agents", agentID)
	if err := privfs.MkdirAll(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "agent.lock")
	f, err := privfs.OpenFile(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: agent %q: %s is locked by another process (%v)", ErrAgentRunning, agentID, path, err)
	}
	return &AgentLock{f: f}, nil
}

// Unlock releases the lock.
func (l *AgentLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unlockFile(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
