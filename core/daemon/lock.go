package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// LockFile is the daemon lock under DATA/run.
const LockFile = "daemon.lock"

// ErrRunning is returned by Run when another daemon holds the data
// directory.
var ErrRunning = errors.New("another daemon is running on this data directory")

// dirLock is the daemon's exclusive lock on a data directory: an flock (a
// LockFileEx on Windows) on DATA/run/daemon.lock, held for the daemon's
// life and released by the kernel when the process dies, so that a crashed
// daemon never blocks the next one. The file holds the holder's pid.
type dirLock struct {
	f *os.File
}

func lockDir(runDir string) (*dirLock, error) {
	path := filepath.Join(runDir, LockFile)
	f, err := privfs.OpenFile(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		holder := ""
		if data, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil && pid > 0 {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		return nil, fmt.Errorf("%w%s: %s is locked; stop it first (`openstarry service stop`, or SIGTERM) or use another --data", ErrRunning, holder, path)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release truncates the pid and unlocks.
func (l *dirLock) release() {
	_ = l.f.Truncate(0)
	_ = unlockFile(l.f)
	_ = l.f.Close()
}
