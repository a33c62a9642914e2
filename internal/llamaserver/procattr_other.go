//go:build !linux

package llamaserver

import "syscall"

// procAttr: only Linux can tie the server's life to the test binary's
// (build.sh builds it for linux/amd64 only anyway).
func procAttr() *syscall.SysProcAttr { return nil }
