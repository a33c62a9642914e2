// Command openstarry is the OpenStarry Edge appliance: the daemon, the agent
// processes it spawns, and the operator's tools, in one static binary.
package main

import (
	"os"
)

func main() {
	os.Exit(execute(os.Args[1:]))
}
