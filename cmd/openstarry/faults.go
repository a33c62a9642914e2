package main

// Fault hooks for the self-update tests: nil in every build but the one
// with the openstarry_faults tag (faults_on.go), which the tests build as a
// "new version" that crashes at boot or declares a newer snapshot schema.
var (
	// bootFault, when set, runs when `start` begins, after the update
	// boot hook.
	bootFault func()
	// faultSchema, when set, changes the snapshot schema version that
	// `version --json` declares.
	faultSchema func(int) int
)
