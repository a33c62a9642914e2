package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
)

// Phase is where an update stands.
type Phase string

// The phases of an update. Staged and trial are transient: a boot finds
// them only after an interruption and settles them. The others are final.
const (
	PhaseStaged     Phase = "staged"      // .new verified; the daemon is asked to apply it
	PhaseTrial      Phase = "trial"       // the slot holds the new binary; it has not proved itself
	PhaseCommitted  Phase = "committed"   // the new binary is kept
	PhaseRolledBack Phase = "rolled_back" // the previous binary is back in the slot
	PhaseAborted    Phase = "aborted"     // interrupted before the swap; nothing changed
)

// Final reports whether p ends an update.
func (p Phase) Final() bool {
	return p == PhaseCommitted || p == PhaseRolledBack || p == PhaseAborted
}

// JournalVersion is the version of the journal's format.
const JournalVersion = 1

// Journal is the update's durable state, DATA/bin/update.json.
type Journal struct {
	Format    int    `json:"format"`
	Phase     Phase  `json:"phase"`
	CommandID string `json:"command_id,omitempty"` // the hub's update command, answered with the outcome
	Source    string `json:"source"`               // where the binary came from
	From      string `json:"from_version"`
	FromSHA   string `json:"from_sha256,omitempty"`
	To        string `json:"to_version"`
	ToSHA     string `json:"to_sha256"`
	// Rollback says the operator asked for this version even if it is
	// older than the running one (see CheckVersion).
	Rollback bool      `json:"rollback,omitempty"`
	Boots    int       `json:"boots"` // starts of the new binary on trial
	Reason   string    `json:"reason,omitempty"`
	Reported bool      `json:"reported"` // the outcome reached the hub
	Started  time.Time `json:"started"`
	Updated  time.Time `json:"updated"`
}

// ErrCorruptJournal is returned when the journal is not one.
var ErrCorruptJournal = errors.New("update journal is damaged")

// Paths are the files of the slot directory.
type Paths struct {
	Dir     string // DATA/bin
	Slot    string // the kept binary
	Prev    string // the one before it
	New     string // the candidate while it is installed
	Journal string
}

// PathsFor returns the paths under data.
func PathsFor(data string) Paths {
	dir := filepath.Join(data, "bin")
	name := "openstarry"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return Paths{Dir: dir, Slot: filepath.Join(dir, name), Prev: filepath.Join(dir, name+".prev"),
		New: filepath.Join(dir, name+".new"), Journal: filepath.Join(dir, "update.json")}
}

// ReadJournal reads the journal; nil, nil when there is none.
func ReadJournal(path string) (*Journal, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update journal: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptJournal, path, err)
	}
	switch j.Phase {
	case PhaseStaged, PhaseTrial, PhaseCommitted, PhaseRolledBack, PhaseAborted:
	default:
		return nil, fmt.Errorf("%w: %s: unknown phase %q", ErrCorruptJournal, path, j.Phase)
	}
	if j.Format > JournalVersion {
		return nil, fmt.Errorf("%w: %s: format %d is newer than this build's %d", ErrCorruptJournal, path, j.Format, JournalVersion)
	}
	return &j, nil
}

// WriteJournal replaces the journal atomically and durably.
func WriteJournal(path string, j *Journal, now time.Time) error {
	j.Format = JournalVersion
	j.Updated = now.UTC()
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("update journal: %w", err)
	}
	return nil
}
