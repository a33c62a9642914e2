//go:build !linux

package bbolt

import "os"

// openFile opens an agent's file for bbolt (see pagecache_linux.go).
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}

// datasync makes what was written to f durable.
func datasync(f *os.File) error { return f.Sync() }

// datasyncPolled is datasync (aiosync_linux.go waits in the poller).
func datasyncPolled(f *os.File) error { return f.Sync() }

// aioRefused: there is no AIO here to be refused.
func aioRefused() bool { return false }

// dropCache does nothing here (see pagecache_linux.go).
func dropCache(*os.File) {}
