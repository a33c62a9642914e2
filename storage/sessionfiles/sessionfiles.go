// Package sessionfiles is session continuity's JSON backup on the local
// disk (session.Backup, the plugin sessionbackup.files): the files of
// seed 003 under DATA/projects/{project_id}/ (session.Layout), each
// replaced atomically (a temporary file, fsync, rename, directory fsync:
// core/atomicfile) with mode 0600 in 0700 directories. What the files
// contain, and when they are written, read and rebuilt, is core/session's;
// this package only moves their bytes. It passes its conformance tests
// (TestBackup).
package sessionfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/session"
)

func init() {
	session.RegisterBackup("files", "session continuity's JSON backup: DATA/projects/{project_id}/..., files 0600 in 0700 directories", Open)
}

// Files is the backup kept under one data directory.
type Files struct{ lay session.Layout }

// Open opens the backup of the data directory data, making it (0700) when
// it is missing. It is a session.BackupOpener.
func Open(data string) (session.Backup, error) {
	if err := mkdirs(data); err != nil {
		return nil, err
	}
	return &Files{lay: session.Layout{Data: data}}, nil
}

// path is where f of the project (and session) is kept.
func (b *Files) path(projectID, sessionID string, f session.BackupFile) (string, error) {
	switch f {
	case session.FileProject:
		return b.lay.ProjectFile(projectID), nil
	case session.FileCheckpoint:
		return b.lay.Checkpoint(projectID, sessionID), nil
	case session.FileApproaches:
		return b.lay.ApproachesFile(projectID, sessionID), nil
	case session.FileRemaining:
		return b.lay.RemainingFile(projectID, sessionID), nil
	case session.FileResumeContext:
		return b.lay.ResumeContextFile(projectID, sessionID), nil
	}
	return "", fmt.Errorf("sessionfiles: no file %q in the backup", f)
}

// Write replaces the file atomically with data, mode 0600; its directory
// is made 0700 when missing (a project's directories 0700 whatever the
// umask).
func (b *Files) Write(projectID, sessionID string, f session.BackupFile, data []byte) error {
	path, err := b.path(projectID, sessionID, f)
	if err != nil {
		return err
	}
	if f == session.FileProject {
		if err := mkdirs(b.lay.Projects(), b.lay.ProjectDir(projectID)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// Read returns the file's bytes; a missing file is an error wrapping
// session.ErrNoFile.
func (b *Files) Read(projectID, sessionID string, f session.BackupFile) ([]byte, error) {
	path, err := b.path(projectID, sessionID, f)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, noFile{err}
	}
	return data, err
}

// noFile is a missing file: it is session.ErrNoFile and says what os said
// (the path), as the logs always have.
type noFile struct{ err error }

func (e noFile) Error() string        { return e.err.Error() }
func (e noFile) Unwrap() error        { return e.err }
func (e noFile) Is(target error) bool { return target == session.ErrNoFile }

// MakeSessionDirs makes the session's directory and its artifacts
// directory, 0700 whatever the umask.
func (b *Files) MakeSessionDirs(projectID, sessionID string) error {
	return mkdirs(b.lay.SessionDir(projectID, sessionID), b.lay.Artifacts(projectID, sessionID))
}

// Projects lists the directories of DATA/projects (none when it is
// missing).
func (b *Files) Projects() ([]string, error) {
	names, err := dirs(b.lay.Projects())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return names, err
}

// Sessions lists the directories of DATA/projects/{project_id}/sessions.
func (b *Files) Sessions(projectID string) ([]string, error) {
	return dirs(filepath.Join(b.lay.ProjectDir(projectID), "sessions"))
}

// dirs lists the directories in dir, by name.
func dirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// mkdirs makes directories 0700 whatever the umask.
func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}
