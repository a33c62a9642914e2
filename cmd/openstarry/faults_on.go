//go:build openstarry_faults

package main

import (
	"fmt"
	"os"
)

// With the openstarry_faults tag, OPENSTARRY_FAULT selects a fault:
// crash_boot makes `start` exit 1 at once (a crash-looping release);
// schema_next makes `version --json` declare the next snapshot schema.
func init() {
	switch os.Getenv("OPENSTARRY_FAULT") {
	case "crash_boot":
		bootFault = func() {
			fmt.Fprintln(os.Stderr, "openstarry: fault crash_boot: exiting at boot")
			os.Exit(1)
		}
	case "schema_next":
		faultSchema = func(v int) int { return v + 1 }
	}
}
