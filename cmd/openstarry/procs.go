package main

import (
	"os"
	"runtime"
)

// oneProcessor makes the daemon and each agent process run their Go code
// on one thread at a time (GOMAXPROCS 1), unless the GOMAXPROCS environment
// variable sets it. They are processes of their own, which the kernel
// spreads over the cores; inside one, a task goes from goroutine to
// goroutine a dozen times or more (paho's reader, router and writer, the
// runtime's loop, the embedded broker's writer of each client), and with a
// second processor idle each of those hand-offs woke a second thread to
// look for work, which found none and slept again: on the 2-core
// development VM a task over MQTT cost 19–24% less processor time with one
// (docs/figures.md, "one processor per process"), and finished sooner.
func oneProcessor() {
	if n := defaultProcs(os.Getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// defaultProcs is the GOMAXPROCS oneProcessor sets: 1, or 0 (leave the
// runtime's) when the environment sets GOMAXPROCS.
func defaultProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return 0
	}
	return 1
}
