//go:build unix && !linux

package daemon

import "syscall"

// sysProcAttr puts the child in its own process group. Without Pdeathsig,
// the child learns of the daemon's death by EOF on its stdin pipe.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
