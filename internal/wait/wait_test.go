package wait

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	if err := Poll(time.Second, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || calls != 3 {
		t.Fatalf("Poll = %v after %d calls; want nil after 3", err, calls)
	}

	last := errors.New("still closed")
	start := time.Now()
	err := Poll(30*time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "not within 30ms") {
		t.Fatalf("Poll = %v; want the last error, wrapped with the timeout", err)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatalf("Poll gave up after %s, before its timeout", time.Since(start))
	}
}

// recorder is a testing.TB that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
}

func TestForAndUntil(t *testing.T) {
	r := &recorder{TB: t}
	For(r, 10*time.Millisecond, "a thing", func() bool { return false })
	if r.failed == "" {
		t.Fatal("For did not fail on a condition that never holds")
	}
	r = &recorder{TB: t}
	n := 0
	For(r, time.Second, "a thing", func() bool { n++; return n == 2 })
	if r.failed != "" || n != 2 {
		t.Fatalf("For failed (%q) or polled %d times; want success on the 2nd", r.failed, n)
	}
	r = &recorder{TB: t}
	Until(r, 10*time.Millisecond, "a thing", func() error { return errors.New("no") })
	if r.failed == "" {
		t.Fatal("Until did not fail on a condition that never holds")
	}
}
