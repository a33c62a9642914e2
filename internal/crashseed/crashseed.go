// Package crashseed gives the randomized crash tests their seed: a new one
// each run, printed, and the same one again with the -crash.seed flag, so a
// failure the suite found once can be replayed:
//
//	go test -run 'TestCrashRecovery/bbolt' -crash.seed=1795424848761169854 ./cmd/openstarry/
//
// The seed fixes every random choice a test makes (which task, which file,
// how long to wait before the kill); the instants at which the child
// process happens to be when the kill lands are the operating system's.
package crashseed

import (
	"flag"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("crash.seed", 0, "replay the crash tests' random choices with the seed a run printed (0: a new seed each run)")

// Seed returns the seed of t's random choices, the -crash.seed flag's when
// it is set, and logs it with the command line that replays it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (go test -run '^%s$' -crash.seed=%d replays it)", seed, t.Name(), seed)
	return seed
}
