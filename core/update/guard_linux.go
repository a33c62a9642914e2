package update

import "syscall"

// childAttr has the kernel kill the new version when its guard dies (even
// by SIGKILL), so that the next start finds the data directory free.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
