//go:build windows

package main

import "os"

// stopSelf ends the process: Windows cannot signal a process, itself
// included, the way run's graceful stop listens for. Every tick is durable
// when it is acknowledged, so nothing is lost; the next start hydrates.
func stopSelf() { os.Exit(0) }
