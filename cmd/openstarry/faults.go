//go:build !openstarry_faults

package main

// Fault hooks for the self-update tests: they do nothing in every build but
// the one with the openstarry_faults tag (faults_on.go), which the tests
// build as a "new version" that crashes at boot or declares a newer
// snapshot schema.

// bootFault runs when `start` begins, after the update boot hook.
func bootFault() {}

// faultSchema is the snapshot schema version that `version --json`
// declares for the version v.
func faultSchema(v int) int { return v }
