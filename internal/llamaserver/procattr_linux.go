package llamaserver

import "syscall"

// procAttr kills the server with the test binary, should that die first.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
