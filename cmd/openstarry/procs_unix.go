//go:build unix

package main

import (
	"os"
	"syscall"
)

// canExecSelf says execSelf can run the daemon again.
const canExecSelf = true

// execSelf replaces this process with the same binary, arguments and
// environment; it returns only on failure. It runs the binary's path
// (os.Executable), not /proc/self/exe, so that the process keeps its name
// (ps, top, pgrep openstarry, systemd); the exec comes right after the
// process started, before an update could replace that path.
func execSelf() error {
	path, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(path, os.Args, os.Environ())
}
