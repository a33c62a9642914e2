//go:build !windows && !plan9 && !js && !wasip1

package bbolt

import (
	"errors"
	"os"
	"syscall"
)

// renameNeedsClose: a file must be closed before another is renamed over
// it.
const renameNeedsClose = false

// tryLock takes bbolt's lock on f (flock) without waiting: busy when
// another process holds it. unlock releases it and closes f.
func tryLock(f *os.File) (unlock func(), busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() { f.Close() }, false, nil
}
