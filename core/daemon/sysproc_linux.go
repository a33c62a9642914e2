//go:build linux

package daemon

import "syscall"

// sysProcAttr puts the child in its own process group (a Ctrl-C on the
// daemon's terminal reaches the daemon only, which then stops the agents in
// order) and has the kernel send it SIGTERM when the daemon dies, even by
// SIGKILL. Pdeathsig fires when the thread that forked exits; the daemon
// never locks goroutines to threads, and the stdin pipe covers the rest.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
