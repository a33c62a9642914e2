//go:build !unix

package fleet

import "time"

// processCPU is not measured here: BenchmarkClaim reports 0.
func processCPU() time.Duration { return 0 }
