//go:build unix

package main

import (
	"os"
	"runtime"
	"syscall"
)

// canExecSelf says execSelf can run the daemon again.
const canExecSelf = true

// execSelf replaces this process with the same binary, arguments and
// environment; it returns only on failure. On Linux it runs
// /proc/self/exe, the file this process runs even if an update replaced
// the path since.
func execSelf() error {
	path := "/proc/self/exe"
	if runtime.GOOS != "linux" {
		p, err := os.Executable()
		if err != nil {
			return err
		}
		path = p
	}
	return syscall.Exec(path, os.Args, os.Environ())
}
