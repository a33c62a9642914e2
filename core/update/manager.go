package update

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
)

// Manager updates the binary of one data directory.
type Manager struct {
	Paths Paths
	Self  Info // this process's binary
	// Running is the version of the daemon the update replaces, when it is
	// not Self's (openstarry update staging for a running daemon, or for
	// the binary installed in the slot); "" means Self.Version. It is the
	// journal's from_version, and what a candidate must not be older than.
	Running string
	Exe     string // the running binary's path
	Trusted []ed25519.PublicKey
	Fetcher Fetcher
	Log     zerolog.Logger
	Now     func() time.Time // default time.Now
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Journal reads the journal.
func (m *Manager) Journal() (*Journal, error) { return ReadJournal(m.Paths.Journal) }

// Write writes the journal.
func (m *Manager) Write(j *Journal) error { return WriteJournal(m.Paths.Journal, j, m.now()) }

func (m *Manager) running() string {
	if m.Running != "" {
		return m.Running
	}
	return m.Self.Version
}

// Stage fetches the candidate at from into Paths.New and checks it: signed
// SHA256SUMS, platform, snapshot schema, and a version not older than the
// running one unless rollback (CheckVersion). It returns the update's
// journal, in phase staged, not yet written. Nothing else changes; on
// error Paths.New is gone.
func (m *Manager) Stage(ctx context.Context, from, commandID string, rollback bool) (j *Journal, err error) {
	if cur, err := m.Journal(); err == nil && cur != nil && cur.Phase == PhaseTrial {
		return nil, fmt.Errorf("%w: %s is on trial; wait until it is committed or rolled back", ErrBusy, cur.To)
	}
	m.removeStrays()
	_, digest, err := m.Fetcher.Fetch(ctx, m.Paths, from, m.Trusted)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.Remove(m.Paths.New)
		}
	}()
	if err := CheckPlatform(m.Paths.New, m.Self.GOOS, m.Self.GOARCH, m.Self.GOARM); err != nil {
		return nil, err
	}
	info, err := Probe(ctx, m.Paths.New)
	if err != nil {
		return nil, err
	}
	if err := Compatible(m.Self, info); err != nil {
		return nil, err
	}
	if err := CheckVersion(m.running(), info.Version, rollback); err != nil {
		return nil, err
	}
	return &Journal{Phase: PhaseStaged, CommandID: commandID, Source: from, From: m.running(),
		To: info.Version, ToSHA: digest, Rollback: rollback, Started: m.now().UTC()}, nil
}

// Apply installs the staged candidate: the running binary is kept as
// Paths.Prev, the journal says trial, then Paths.New is renamed over the
// slot. The next start of the daemon runs it on trial under a guard.
// The version check is made again against the version that runs here
// (another binary may have staged it), which becomes the journal's
// from_version; a refusal aborts the update.
func (m *Manager) Apply(j *Journal) error {
	j.From = m.running()
	if err := CheckVersion(j.From, j.To, j.Rollback); err != nil {
		os.Remove(m.Paths.New)
		return m.abort(j, err)
	}
	got, err := FileSHA256(m.Paths.New)
	if err != nil {
		return err
	}
	if got != j.ToSHA {
		return fmt.Errorf("update: %s changed since it was verified (sha256 %q, want %s)", m.Paths.New, got, j.ToSHA)
	}
	if err := m.keepRunning(); err != nil {
		return fmt.Errorf("update: keep the running binary as %s: %w", m.Paths.Prev, err)
	}
	if j.FromSHA, err = FileSHA256(m.Paths.Prev); err != nil {
		return err
	}
	j.Phase, j.Boots, j.Reason, j.Reported = PhaseTrial, 0, "", false
	if err := m.Write(j); err != nil {
		return err
	}
	// The commit point of the swap.
	if err := os.Rename(m.Paths.New, m.Paths.Slot); err != nil {
		return m.abort(j, fmt.Errorf("update: swap: %w", err))
	}
	if err := atomicfile.SyncDir(m.Paths.Dir); err != nil {
		return fmt.Errorf("update: swap: fsync %s: %w", m.Paths.Dir, err)
	}
	m.Log.Info().Str("from", j.From).Str("to", j.To).Str("sha256", j.ToSHA).Msg("update: installed; it runs on trial at the next start")
	return nil
}

func (m *Manager) abort(j *Journal, cause error) error {
	j.Phase, j.Reason = PhaseAborted, cause.Error()
	if err := m.Write(j); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// keepRunning makes Paths.Prev a durable copy of the running binary (a
// hard link when it can).
func (m *Manager) keepRunning() error {
	if same(m.Exe, m.Paths.Prev) {
		return nil
	}
	tmp := m.Paths.Prev + ".tmp"
	os.Remove(tmp)
	if err := os.Link(m.Exe, tmp); err != nil {
		if err := copyFile(m.Exe, tmp); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, m.Paths.Prev); err != nil {
		os.Remove(tmp)
		return err
	}
	return atomicfile.SyncDir(m.Paths.Dir)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Rollback puts Paths.Prev back in the slot and records why. Without a
// previous binary, the slot is moved aside: the installed binary runs.
func (m *Manager) Rollback(j *Journal, reason string) error {
	if _, err := os.Stat(m.Paths.Prev); err == nil {
		if err := os.Rename(m.Paths.Prev, m.Paths.Slot); err != nil {
			return fmt.Errorf("update: rollback: %w", err)
		}
	} else {
		reason += "; no previous binary was kept: the installed one runs"
		if err := os.Rename(m.Paths.Slot, m.Paths.Slot+".failed"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("update: rollback: %w", err)
		}
	}
	if err := atomicfile.SyncDir(m.Paths.Dir); err != nil {
		return fmt.Errorf("update: rollback: %w", err)
	}
	j.Phase, j.Reason, j.Reported = PhaseRolledBack, reason, false
	m.Log.Error().Str("from", j.To).Str("to", j.From).Str("reason", reason).Msg("update: rolled back")
	return m.Write(j)
}

// Action is what a starting daemon does about updates.
type Action int

const (
	// Run: boot this binary.
	Run Action = iota
	// Hop: exec the slot binary, the version kept by the last update.
	Hop
	// Guard: run the slot binary on trial under Guard.
	Guard
)

// Boot settles the journal at the start of the daemon (not of a trial
// child) and says what to do. It never fails the boot: a problem is
// logged and answered with Run, the binary that is running.
func (m *Manager) Boot() (Action, *Journal) {
	m.removeStrays()
	j, err := m.Journal()
	if err != nil {
		m.Log.Error().Err(err).Msg("update: the journal cannot be read; running this binary, not the data directory's")
		return Run, nil
	}
	if j == nil {
		return Run, nil
	}
	switch j.Phase {
	case PhaseStaged:
		os.Remove(m.Paths.New)
		if err := m.abort(j, errors.New("interrupted before it was installed (a restart during the update)")); err != nil {
			m.Log.Error().Err(err).Msg("update: abort the staged update")
		}
	case PhaseTrial:
		slot, err := FileSHA256(m.Paths.Slot)
		if err != nil {
			m.Log.Error().Err(err).Msg("update: read the slot binary")
			return Run, j
		}
		if slot == j.ToSHA {
			return Guard, j
		}
		reason := "interrupted before the swap (a restart during the update); nothing changed"
		if slot != "" && slot == j.FromSHA {
			j.Phase, reason = PhaseRolledBack, "rolled back (a restart during the rollback lost its reason)"
		} else {
			j.Phase = PhaseAborted
		}
		j.Reason, j.Reported = reason, false
		os.Remove(m.Paths.New)
		if err := m.Write(j); err != nil {
			m.Log.Error().Err(err).Msg("update: settle the journal")
		}
	}
	if _, err := os.Stat(m.Paths.Slot); err != nil || same(m.Exe, m.Paths.Slot) {
		return Run, j
	}
	return Hop, j
}

// removeStrays removes the temporary files an interrupted update left.
func (m *Manager) removeStrays() {
	ents, _ := os.ReadDir(m.Paths.Dir)
	for _, e := range ents {
		n := e.Name()
		if strings.Contains(n, ".tmp-") || strings.HasSuffix(n, ".prev.tmp") {
			os.Remove(filepath.Join(m.Paths.Dir, n))
		}
	}
}

func same(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(fa, fb)
}
