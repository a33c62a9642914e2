package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
)

// bootRecord is DATA/run/boot.json, the daemon's boot journal: which
// machine boot it started in, when, and whether it stopped cleanly. The
// next boot reads it to tell how the previous run ended.
type bootRecord struct {
	BootID    string     `json:"boot_id"` // /proc/sys/kernel/random/boot_id; empty where there is none
	PID       int        `json:"pid"`
	StartedAt time.Time  `json:"started_at"`
	CleanStop bool       `json:"clean_stop"`
	StoppedAt *time.Time `json:"stopped_at,omitempty"`
}

// How the previous run ended.
const (
	PreviousNone      = "none"       // no journal: the first boot of this data directory
	PreviousClean     = "clean"      // stopped cleanly
	PreviousCrash     = "crash"      // no clean stop, same machine boot
	PreviousPowerLoss = "power_loss" // no clean stop, and the machine booted since
)

// bootIDFile is where Linux keeps the random id of the current boot.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

func machineBootID() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func journalPath(runDir string) string { return filepath.Join(runDir, "boot.json") }

// readJournal says how the previous run ended, from its record and the
// current machine boot id. A damaged record counts as a crash.
func readJournal(runDir, bootID string) (string, *bootRecord) {
	data, err := os.ReadFile(journalPath(runDir))
	if errors.Is(err, os.ErrNotExist) {
		return PreviousNone, nil
	}
	var r bootRecord
	if err != nil || json.Unmarshal(data, &r) != nil {
		return PreviousCrash, nil
	}
	switch {
	case r.CleanStop:
		return PreviousClean, &r
	case r.BootID != "" && bootID != "" && r.BootID != bootID:
		return PreviousPowerLoss, &r
	}
	return PreviousCrash, &r
}

// writeJournal records this run's start (clean_stop false) or its clean
// stop, durably.
func writeJournal(runDir string, r bootRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(journalPath(runDir), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("boot journal: %w", err)
	}
	return nil
}

// openJournal logs how the previous run ended (from the boot journal and
// the machine's boot id), then records this run's start, durably. It
// returns how the previous run ended.
func (b *bootState) openJournal() (string, error) {
	bootID := machineBootID()
	prev, rec := readJournal(b.runDir, bootID)
	b.mu.Lock()
	b.previousRun = prev
	b.mu.Unlock()
	ev := b.log.Info()
	if prev == PreviousCrash || prev == PreviousPowerLoss {
		ev = b.log.Warn()
	}
	if rec != nil {
		ev = ev.Time("previous_start", rec.StartedAt).Int("previous_pid", rec.PID)
	}
	ev.Str("previous_run", prev).Str("boot_id", bootID).Msgf("previous run: %s", prev)
	if err := writeJournal(b.runDir, bootRecord{BootID: bootID, PID: os.Getpid(), StartedAt: b.started.UTC()}); err != nil {
		return prev, err
	}
	return prev, nil
}

// journalCleanStop records that this run stopped cleanly.
func (b *bootState) journalCleanStop() {
	now := b.now().UTC()
	if err := writeJournal(b.runDir, bootRecord{BootID: machineBootID(), PID: os.Getpid(), StartedAt: b.started.UTC(),
		CleanStop: true, StoppedAt: &now}); err != nil {
		b.log.Error().Err(err).Msg("recording the clean stop")
	}
}
