// Package privfs owns the permissions of everything the product creates on
// disk: directories 0700 and files 0600, whatever the process's umask (a
// umask can only take bits away, so asking for these modes at creation is
// enough; nothing is chmodded afterwards except files that another library
// created with wider bits, see Tighten).
//
// The one exception is the service's data directory itself, which systemd
// makes 0750 (StateDirectoryMode) so that members of the service's group
// may read it; SharedDirMode names that mode.
package privfs

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
)

// Modes of what the product creates.
const (
	DirMode       os.FileMode = 0o700 // every directory
	FileMode      os.FileMode = 0o600 // every file
	ReadOnlyMode  os.FileMode = 0o400 // frozen files nobody may change (blueprints)
	SharedDirMode os.FileMode = 0o750 // the service's data directory: its group may read
)

// MkdirAll creates path and its missing parents with DirMode. Directories
// that exist already are left as they are.
func MkdirAll(path string) error { return os.MkdirAll(path, DirMode) }

// OpenFile opens path with flag; a file it creates gets FileMode.
func OpenFile(path string, flag int) (*os.File, error) { return os.OpenFile(path, flag, FileMode) }

// WriteFile writes data to path (not atomically; see core/atomicfile),
// creating it with FileMode.
func WriteFile(path string, data []byte) error { return os.WriteFile(path, data, FileMode) }

// Create makes path as an empty FileMode file if it does not exist, so that
// a library that copies the mode of an existing file (SQLite's -wal and
// -shm files take the database's) or that creates files with wider bits
// of its own finds a private one.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	return f.Close()
}

// Tighten removes the group and other bits of the file at path, if it
// exists and has any; it reports whether it changed the mode. It is for
// files an older version or another library created with wider modes.
func Tighten(path string) (bool, error) {
	if runtime.GOOS == "windows" {
		return false, nil // no mode bits there; the ACL of the directory decides
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return false, nil
	}
	return true, os.Chmod(path, fi.Mode().Perm()&^0o077)
}
