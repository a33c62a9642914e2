//go:build !linux

package update

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
