// Package atomicfile replaces files so that a reader, even after a power
// loss, sees the old content or the new one, never a mix: a temporary file in
// the same directory, write, chmod, fsync, close, rename over the target, then
// fsync of the directory so the rename itself is durable.
//
// It is also the one place that makes a directory entry durable, for every
// package that creates, renames or removes files (the file and bbolt
// stores, the template cache, the daemon's run directory): SyncDir, Rename
// and MkdirAll behave the same for all of them on every system.
//
// # Windows
//
// Windows cannot fsync a directory: a directory opened with os.Open is a
// read-only handle, and FlushFileBuffers on it fails with "Access is
// denied". NTFS keeps names in its metadata journal instead, so SyncDir
// does nothing there, and Rename asks MoveFileEx to write the rename
// through to the disk (MOVEFILE_WRITE_THROUGH) before it returns, which is
// what SyncDir after a rename gives elsewhere. A name created otherwise
// (a new file, a hard link, a directory) reaches the disk with the
// journal, at the latest when a later fsync of a file on the volume
// flushes it.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// WriteFile replaces path with data, with permissions perm. A read-only
// target is replaced too. On error the target is unchanged and the temporary
// file is removed.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err = f.Chmod(perm); err != nil && runtime.GOOS != "windows" {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if runtime.GOOS == "windows" {
		_ = os.Chmod(path, 0o640) // Windows refuses to replace a read-only file
	}
	if err = Rename(tmp, path); err != nil {
		return err
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and any missing parents, like os.MkdirAll, and
// makes the whole chain durable: it fsyncs dir and every directory above
// it, so that after a power cut each name on the path is there, whoever
// created it and whether or not it existed already. An ancestor this
// process may not open (a parent it can only traverse) ends the chain
// without an error. Windows journals directory entries; there it only
// creates.
func MkdirAll(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	if runtime.GOOS == "windows" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if err := SyncDir(d); err != nil {
			if d != abs && errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return fmt.Errorf("fsync %s: %w", d, err)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}
