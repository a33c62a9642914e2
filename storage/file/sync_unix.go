//go:build !windows

package file

import "os"

// syncDir fsyncs the directory at path, so that the renames and creations
// in it are durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// rename is os.Rename; syncDir makes it durable.
func rename(from, to string) error { return os.Rename(from, to) }
