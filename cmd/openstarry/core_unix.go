//go:build unix

package main

import (
	"os"
	"syscall"
)

// stopSelf sends this process SIGTERM: run's graceful stop.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) }
