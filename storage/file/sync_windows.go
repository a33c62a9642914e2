//go:build windows

package file

import (
	"os"

	"golang.org/x/sys/windows"
)

// syncDir does nothing on Windows, which cannot open a directory for fsync;
// rename asks NTFS to write each rename through to the disk instead.
func syncDir(path string) error { return nil }

// rename is os.Rename with MOVEFILE_WRITE_THROUGH: MoveFileEx returns only
// after the rename is on disk, which is what syncDir gives on other systems.
func rename(from, to string) error {
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
