// Package atomicfile replaces files so that a reader, even after a power
// loss, sees the old content or the new one, never a mix: a temporary file in
// the same directory, write, chmod, fsync, close, rename over the target, then
// fsync of the directory so the rename itself is durable.
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
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// SyncDir makes a rename in dir durable. Windows cannot fsync a directory
// (NTFS journals the rename); there it does nothing.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
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
