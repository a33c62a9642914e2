//go:build windows

package daemon

import "syscall"

// sysProcAttr starts the child in its own process group, so that a Ctrl-C
// in the daemon's console reaches the daemon only.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// terminate closes the child's stdin pipe, which `openstarry core` watches:
// Windows has no SIGTERM to send to another process.
func terminate(p *execProcess) error { return p.closeStdin() }
