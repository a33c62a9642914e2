package bbolt

import (
	"errors"
	"os"
	"time"
)

// errLockBusy: another process holds the file's lock.
var errLockBusy = errors.New("the file is locked by another process")

// lockFile takes the exclusive lock bbolt takes on the file at path,
// waiting up to timeout for another process to release it, so that a
// salvage never replaces the file of a running agent. unlock releases it.
func lockFile(path string, timeout time.Duration) (unlock func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		unlock, busy, err := tryLock(f)
		switch {
		case err == nil && !busy:
			return unlock, nil
		case err != nil:
			f.Close()
			return nil, err
		case time.Now().After(deadline):
			f.Close()
			return nil, errLockBusy
		}
		time.Sleep(10 * time.Millisecond)
	}
}
