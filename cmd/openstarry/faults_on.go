//go:build openstarry_faults

package main

import (
	"fmt"
	"os"
)

// With the openstarry_faults tag, OPENSTARRY_FAULT selects a fault:
// crash_boot makes `start` exit 1 at once (a crash-looping release);
// schema_next makes `version --json` declare the next snapshot schema.

// bootFault runs when `start` begins, after the update boot hook.
func bootFault() {
	if os.Getenv("OPENSTARRY_FAULT") == "crash_boot" {
		fmt.Fprintln(os.Stderr, "openstarry: fault crash_boot: exiting at boot")
		os.Exit(1)
	}
}

// faultSchema is the snapshot schema version that `version --json`
// declares for the version v.
func faultSchema(v int) int {
	if os.Getenv("OPENSTARRY_FAULT") == "schema_next" {
		return v + 1
	}
	return v
}
