// Command openstarry is the OpenStarry Edge appliance: the daemon, the agent
// processes it spawns, and the operator's tools, in one static binary.
package main

import (
	"os"
	"runtime"
)

// init keeps main on the process's first thread until quietSysmon has run:
// its exec must come from that thread, whose parent-death signal is the
// process's (a thread's own: an exec from another thread, which becomes
// the process's only one, loses it, and the update guard relies on it to
// take the daemon on trial down with it).
func init() { runtime.LockOSThread() }

func main() {
	quietSysmon(os.Args[1:])
	runtime.UnlockOSThread()
	os.Exit(execute(os.Args[1:]))
}
