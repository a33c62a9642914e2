//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// survivePipeClose keeps a long-running process (the daemon, an agent)
// alive when the reader of its standard output or error goes away: `make
// run | tee run.log` then Ctrl-C ends tee first, and Go's default for a
// write to a closed pipe on fd 1 or 2 is to die of SIGPIPE, which skipped
// the clean stop (the next boot said "previous run: crash"). With SIGPIPE
// notified, such a write fails with EPIPE instead and the process goes on
// to stop cleanly. Notify, not Ignore: an ignored signal stays ignored in
// the programs the process starts (MCP servers, shells), a handler does not.
func survivePipeClose() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}
