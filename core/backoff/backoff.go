// Package backoff owns the one retry schedule of the product: an
// exponential wait, capped, with one jitter rule. The daemon's supervisor
// (restarting a crashed agent), the design layer's fetcher (retrying a
// template) and an agent's MQTT connection to the hub (transport/mqtt:
// every failed attempt, before the first connection and after a loss) all
// wait by it, so that a fleet that failed together spreads out the same
// way everywhere.
//
// Invariant: Delay(n) is Initial·2ⁿ, at most Max, times a factor drawn
// uniformly from [1−Jitter, 1+Jitter), Jitter being ±20%. It never
// overflows and never returns a negative wait.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter is the spread of every wait: ±20% around the exponential
// schedule, enough that agents or devices that failed at the same instant
// do not retry in step, small enough that a wait stays predictable.
const Jitter = 0.2

// Policy is an exponential backoff. The zero value of Rand means
// math/rand/v2's Float64.
type Policy struct {
	// Initial is the wait before the first retry (n = 0).
	Initial time.Duration
	// Max caps the wait before jitter; with 0 the wait stays Initial.
	Max time.Duration
	// Rand returns a float in [0, 1); tests make it deterministic.
	Rand func() float64
}

// Base returns the wait before retry n (0-based) without jitter:
// Initial·2ⁿ, at most Max.
func (p Policy) Base(n int) time.Duration {
	b := p.Initial
	for i := 0; i < n && b < p.Max; i++ {
		b *= 2
	}
	if p.Max > 0 && (b > p.Max || b <= 0) {
		b = p.Max
	}
	return max(b, 0)
}

// Delay returns the wait before retry n (0-based): Base(n) with jitter.
func (p Policy) Delay(n int) time.Duration { return p.jitter(p.Base(n)) }

func (p Policy) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*p.rand()))
}

func (p Policy) rand() float64 {
	if p.Rand != nil {
		return p.Rand()
	}
	return rand.Float64()
}
