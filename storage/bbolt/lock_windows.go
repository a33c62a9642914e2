//go:build windows

package bbolt

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// renameNeedsClose: a file must be closed before another is renamed over
// it.
const renameNeedsClose = true

// tryLock takes bbolt's lock on f (LockFileEx on bbolt's byte range, -1..0,
// as bolt_windows.go does) without waiting: busy when another process
// holds it. unlock releases it and closes f.
func tryLock(f *os.File) (unlock func(), busy bool, err error) {
	ol := &windows.Overlapped{Offset: ^uint32(0), OffsetHigh: ^uint32(0)}
	err = windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() {
		_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
		f.Close()
	}, false, nil
}
