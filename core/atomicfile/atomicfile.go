// Package atomicfile replaces files so that a reader, even after a power
// loss, sees the old content or the new one, never a mix: a temporary file in
// the same directory, write, chmod, fsync, close, rename over the target, then
// fsync of the directory so the rename itself is durable.
package atomicfile

import (
	"fmt"
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
