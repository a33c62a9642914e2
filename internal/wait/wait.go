// Package wait is how the tests wait: for a condition to hold (For, Until,
// Poll), or, when a test checks that something does not happen, for long
// enough that it would have happened (Settle).
//
// A test never sleeps for something to happen: it polls the condition it
// needs, with a deadline that only a broken program reaches. A test that
// checks an absence (no second reply, no duplicate run) calls Settle, whose
// reason says what would have arrived by then.
package wait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Poll calls try until it returns nil or timeout passes, and returns nil or
// try's last error wrapped with the time waited. It is the loop itself, for
// callers that fail with a message of their own or cannot fail the test
// (a goroutine). Between calls it waits 1 ms, doubling up to 20 ms.
func Poll(timeout time.Duration, try func() error) error {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// errNotYet is what For's condition returns while it does not hold.
var errNotYet = errors.New("the condition does not hold")

// For polls cond until it returns true, and fails t if timeout passes
// first, naming what it waited for.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := Poll(timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Until polls try until it returns nil, and fails t with what and try's
// last error if timeout passes first.
func Until(t testing.TB, timeout time.Duration, what string, try func() error) {
	t.Helper()
	if err := Poll(timeout, try); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Settle lets d pass before a test checks that something did not happen;
// why says what would have happened by then (and is logged with the wait).
func Settle(t testing.TB, d time.Duration, why string) {
	t.Helper()
	t.Logf("settling %s: %s", d, why)
	time.Sleep(d)
}
