package session

import (
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// ErrNoFile is returned, wrapped, by a Backup asked to read a file that
// does not exist; callers test with errors.Is.
var ErrNoFile = errors.New("no such file")

// BackupFile names one JSON file of the backup (files.go holds their
// formats; Layout their place under the data directory).
type BackupFile string

// The files of the backup. FileProject is the project's (its session id
// is ""); the others are a session's.
const (
	FileProject       BackupFile = "project.json"
	FileCheckpoint    BackupFile = "state_checkpoint.json"
	FileApproaches    BackupFile = "approaches.json"
	FileRemaining     BackupFile = "remaining_tasks.json"
	FileResumeContext BackupFile = "resume_context.json"
)

// Backup keeps the JSON backup of the store (seed 003's files under
// DATA/projects/{project_id}/, Layout). This package decides what the
// files contain and when they are written, read and rebuilt (persist.go);
// a Backup only moves their bytes. storage/sessionfiles is the one on the
// local disk. Every method is safe for concurrent use.
type Backup interface {
	// Write replaces a file with data, atomically: a reader sees the old
	// bytes or the new ones, and they are durable when it returns. The
	// file is private to its owner (0600), its directories too (0700),
	// made when missing.
	Write(projectID, sessionID string, f BackupFile, data []byte) error
	// Read returns a file's bytes, or an error wrapping ErrNoFile when
	// there is none.
	Read(projectID, sessionID string, f BackupFile) ([]byte, error)
	// MakeSessionDirs makes a session's directory and its artifacts
	// directory (Layout.Artifacts, where its tools write), 0700 whatever
	// the umask.
	MakeSessionDirs(projectID, sessionID string) error
	// Projects lists the names under which projects are kept, unchecked
	// (none, and no error, when there is no project yet).
	Projects() ([]string, error)
	// Sessions lists the names under which a project's sessions are kept,
	// unchecked.
	Sessions(projectID string) ([]string, error)
}

// BackupOpener opens the backup kept in the data directory data, making
// it (0700) when it is missing. It is the constructor of the plugins of
// kind sessionbackup.
type BackupOpener func(data string) (Backup, error)

// backupKind declares the kind sessionbackup, before any backup registers.
var backupKind = registry.DeclareKind(registry.KindSessionBackup, "session.BackupOpener", registry.Is[BackupOpener])

// RegisterBackup registers a backup under name ("files"): the plugin
// sessionbackup.{name}. It is called from init and panics on a duplicate,
// as plugin.Register does.
func RegisterBackup(name, description string, open BackupOpener) {
	plugin.Register(plugin.Info{ID: string(registry.KindSessionBackup) + "." + name, Description: description, New: open})
}

// LookupBackup returns the backup registered under name, or an error
// saying why there is none (left out by a build tag, or no such plugin).
func LookupBackup(name string) (BackupOpener, error) {
	id := string(registry.KindSessionBackup) + "." + name
	info, ok := plugin.Lookup(id)
	if !ok {
		if tag, out := plugin.Omitted()[id]; out {
			return nil, plugin.NotCompiledIn("session continuity", tag)
		}
		return nil, fmt.Errorf("session continuity: no session backup %q in this build (built in: %s)", name, plugin.Names(registry.KindSessionBackup))
	}
	open, ok := info.New.(BackupOpener)
	if !ok {
		return nil, fmt.Errorf("session continuity: plugin %s is a %T, not a session.BackupOpener", id, info.New)
	}
	return open, nil
}
