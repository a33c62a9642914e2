//go:build !windows && !plan9 && !js && !wasip1

package bbolt

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// renameNeedsClose: a file must be closed before another is renamed over
// it.
const renameNeedsClose = false

// errLockBusy: another process holds the file's lock.
var errLockBusy = errors.New("the file is locked by another process")

// lockFile takes the exclusive lock bbolt takes on the file at path (flock),
// waiting up to timeout for another process to release it, so that a
// salvage never replaces the file of a running agent. unlock releases it.
func lockFile(path string, timeout time.Duration) (unlock func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
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
