//go:build windows

package bbolt

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/windows"
)

// renameNeedsClose: a file must be closed before another is renamed over
// it.
const renameNeedsClose = true

// errLockBusy: another process holds the file's lock.
var errLockBusy = errors.New("the file is locked by another process")

// lockFile takes the exclusive lock bbolt takes on the file at path
// (LockFileEx), waiting up to timeout for another process to release it,
// so that a salvage never replaces the file of a running agent. unlock
// releases it.
func lockFile(path string, timeout time.Duration) (unlock func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		// bbolt's byte range, -1..0 (bolt_windows.go).
		ol := &windows.Overlapped{Offset: ^uint32(0), OffsetHigh: ^uint32(0)}
		err := windows.LockFileEx(windows.Handle(f.Fd()),
			windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
		if err == nil {
			return func() {
				_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
				f.Close()
			}, nil
		}
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, errLockBusy
		}
		time.Sleep(10 * time.Millisecond)
	}
}
