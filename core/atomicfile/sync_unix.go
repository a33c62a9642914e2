//go:build !windows

package atomicfile

import "os"

// SyncDir fsyncs the directory dir, so that the names created, renamed or
// removed in it are durable. (On Windows it does nothing: see the package
// doc.)
func SyncDir(dir string) error {
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

// Rename is os.Rename; SyncDir of the target's directory makes it durable.
func Rename(from, to string) error { return os.Rename(from, to) }
