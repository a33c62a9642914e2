//go:build windows

package atomicfile

import (
	"os"

	"golang.org/x/sys/windows"
)

// SyncDir does nothing on Windows, which cannot fsync a directory (see the
// package doc); Rename writes renames through instead.
func SyncDir(dir string) error { return nil }

// Rename is os.Rename with MOVEFILE_WRITE_THROUGH: MoveFileEx returns only
// after the rename is on disk, which is what SyncDir gives on other systems.
func Rename(from, to string) error {
	f, err := windows.UTF16PtrFromString(from)
	if err != nil {
		return err
	}
	t, err := windows.UTF16PtrFromString(to)
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(f, t, windows.MOVEFILE_REPLACE_EXISTING|windows.MOVEFILE_WRITE_THROUGH); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
